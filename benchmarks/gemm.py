"""GEMM benchmark: a hand-scheduled 1024^3 float32 matmul against numpy (OpenBLAS), same run.

Schedule (as TVM's "optimize GEMM on CPU" recipe): B packed into ``[N/bn, K, bn]`` (parallel,
vectorized), C tiled ``bm x bn`` with a write cache computed at the tile, the cache's rows split
into register blocks of ``rb`` rows (unrolled) over an unrolled ``k`` step, ``bn`` columns
vectorized, outer rows parallel.

Timing: for each thread count, rounds alternate templtune and numpy; each side reports the median
over rounds, so both see the same machine load. Each side's timing starts ``--settle`` seconds
after the other side's calls: after a call, OpenBLAS's worker threads keep spinning for tens of
milliseconds (libgomp's for a few), and a kernel timed in that window shares a core with a
spinner, which made the 2-thread figures of both sides lower than their 1-thread ones. Run::

    python benchmarks/gemm.py [--size 1024] [--rounds 7] [--threads 1 2] [--settle 0.1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

try:
    import templtune  # noqa: F401
except ImportError:  # run from a checkout without installing: use the repository root
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from threadpoolctl import threadpool_limits

import templtune
from templtune import te
from templtune.codegen.llvm import compile as cc


def gemm_schedule(m: int, n: int, k: int, bn: int, bm: int = 32, rb: int = 4, ku: int = 4):
    """The schedule and arguments of ``C = A @ B`` (see the module docstring)."""
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    kr = te.reduce_axis((0, k), name="k")
    packed = te.compute((n // bn, k, bn), lambda x, y, z: b[y, x * bn + z], name="packedB")
    c = te.compute((m, n), lambda x, y: te.sum(a[x, kr] * packed[y // bn, kr, y % bn], axis=kr),
                   name="C")
    s = te.create_schedule(c.op)
    cc_ = s.cache_write(c, "global")
    xo, yo, xi, yi = s[c].tile(c.op.axis[0], c.op.axis[1], bm, bn)
    s[cc_].compute_at(s[c], yo)
    xc, yc = s[cc_].op.axis
    (kk,) = s[cc_].op.reduce_axis
    ko, ki = s[cc_].split(kk, factor=ku)
    xco, xci = s[cc_].split(xc, factor=rb)
    s[cc_].reorder(xco, ko, ki, xci, yc)
    s[cc_].unroll(ki)
    s[cc_].unroll(xci)
    s[cc_].vectorize(yc)
    s[c].parallel(xo)
    s[c].vectorize(yi)
    x, _, z = s[packed].op.axis
    s[packed].vectorize(z)
    s[packed].parallel(x)
    return s, [a, b, c]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--number", type=int, default=3, help="calls per round and side")
    ap.add_argument("--bn", type=int, default=0, help="tile width (vector lanes); 0: by ISA")
    ap.add_argument("--rb", type=int, default=0, help="register-block rows; 0: by ISA")
    ap.add_argument("--settle", type=float, default=0.1,
                    help="idle seconds before each side's timing (spinning peer threads stop)")
    opts = ap.parse_args()
    n = opts.size
    # NOTE: the accumulator block is rb rows x bn lanes. AVX2 (16 ymm registers): 4 x 16 floats
    # = 8 registers. AVX-512 (32 zmm registers): 8 x 32 floats = 16 registers.
    avx512 = "+avx512f" in cc.host_spec().features
    bn = opts.bn or (32 if avx512 else 16)
    rb = opts.rb or (8 if avx512 else 4)
    s, args = gemm_schedule(n, n, n, bn=bn, rb=rb)
    t0 = time.perf_counter()
    mod = templtune.build(s, args, target="llvm", name="gemm")
    print(f"build: {1e3 * (time.perf_counter() - t0):.0f} ms (bn={bn}, rb={rb}, "
          f"cpu={cc.host_spec().cpu})")
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    flop = 2.0 * n**3
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)")
    print(f"{'threads':>7} {'templtune GFLOPS':>17} {'numpy GFLOPS':>13} {'ratio':>6}")
    for th in opts.threads:
        mod.set_num_threads(th)
        ev = mod.time_evaluator("gemm", templtune.cpu(), number=opts.number, repeat=1)
        ours, theirs = [], []
        with threadpool_limits(limits=th):
            a @ b  # warm-up
            for _ in range(opts.rounds):
                time.sleep(opts.settle)
                ours.append(ev(a, b, c).results[0])
                time.sleep(opts.settle)
                t = time.perf_counter()
                for _ in range(opts.number):
                    np.matmul(a, b)
                theirs.append((time.perf_counter() - t) / opts.number)
        g_ours = flop / statistics.median(ours) / 1e9
        g_np = flop / statistics.median(theirs) / 1e9
        print(f"{th:>7} {g_ours:>17.1f} {g_np:>13.1f} {g_ours / g_np:>6.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
