"""GEMM benchmark: 1024^3 float32 matmuls against numpy (OpenBLAS) and the FMA peak, same run.

Kernels: a hand schedule (TVM's "optimize GEMM on CPU" recipe: B packed into ``[N/bn, K, bn]``,
C tiled ``bm x bn`` with a write cache computed at the tile, its rows split into register blocks
of ``rb`` rows over an unrolled ``k`` step, ``bn`` columns vectorized, row tiles outermost and
parallel); the ``dense`` template with its fallback config and with the best record of the
packaged reference log (``--log`` for others), weight packed by the template (``dense``) or
ahead of time (``dense prepacked``); numpy; the FMA peak (explicit FMA chains,
``benchmarks/ops.py``).

The hand schedule's loop order (row tiles outermost, one column block per tile) is the one the
``dense`` template had before its column-block tiles. Timing: for each thread count, rounds alternate every kernel; each reports the median over
rounds, so all see the same machine load. At 1 thread the time is the calling thread's CPU
time (``time.thread_time``: what other processes on the shared cores take is not counted), at
more threads wall time (their ratios to numpy in the same rounds are the figure to read;
``p/round`` is the median of each round's ratio to the FMA peak timed in that round). Each
timing starts ``--settle`` seconds after the previous kernel's calls: OpenBLAS's worker threads
keep spinning for tens of milliseconds after a call (libgomp's for a few). Run::

    python benchmarks/gemm.py [--size 1024] [--rows M] [--rounds 9] [--threads 1 2]
        [--settle 0.1] [--log L ...]

``--rows M`` times an ``M x size`` by ``size x size`` product (the hand schedule only where its
32-row tiles divide ``M``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import templtune  # noqa: F401
except ImportError:  # run from a checkout without installing: use the repository root
    import pathlib

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


def _template(args: tuple, logs: list[str] | None) -> Any:
    """The ``dense`` template's module for ``args``: fallback config (``logs`` None) or the
    best record of ``logs``."""
    from templtune import autotvm
    from templtune.autotvm import strategy
    from templtune.autotvm.task.space import FallbackConfigEntity

    if logs is None:
        task = autotvm.task.create("dense", args, "llvm")
        with autotvm.ApplyConfig(FallbackConfigEntity()):
            s, bufs = task.func(*task.args)
    else:
        with autotvm.apply_history_best(logs):
            s, bufs = strategy.instantiate(strategy.Implementation("dense", args), "llvm")
    return templtune.build(s, bufs, target="llvm")


def _timer(threads: int) -> Callable[[], float]:
    return time.thread_time if threads == 1 else time.perf_counter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=0,
                    help="rows M of A (default: --size); e.g. 197, a prime count of tokens")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--number", type=int, default=3, help="calls per round and kernel")
    ap.add_argument("--bn", type=int, default=0, help="tile width (vector lanes); 0: by ISA")
    ap.add_argument("--rb", type=int, default=0, help="register-block rows; 0: by ISA")
    ap.add_argument("--settle", type=float, default=0.1,
                    help="idle seconds before each timing (spinning peer threads stop)")
    ap.add_argument("--log", nargs="*", default=None,
                    help="tuning logs for the template (default: the packaged reference log)")
    opts = ap.parse_args()
    from ops import fma_peak

    import templtune.templates.x86.dense  # noqa: F401 - registers the template
    from templtune.autotvm.task.reference import reference_log_files
    from templtune.templates._strategy import pack_dense

    n = opts.size
    m = opts.rows or n
    # NOTE: the accumulator block is rb rows x bn lanes. AVX2 (16 ymm registers): 4 x 16 floats
    # = 8 registers. AVX-512 (32 zmm registers): 8 x 32 floats = 16 registers.
    avx512 = "+avx512f" in cc.host_spec().features
    bn = opts.bn or (32 if avx512 else 16)
    rb = opts.rb or (8 if avx512 else 4)
    logs = opts.log if opts.log is not None else [str(p) for p in reference_log_files("llvm")]
    pb = 32 if avx512 else 16
    rng = np.random.default_rng(0)
    a = rng.random((m, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    wt = np.ascontiguousarray(b.T)  # dense's weight [N, K]: out = a @ wt.T = a @ b
    kernels: dict[str, tuple[Any, list[np.ndarray]]] = {}
    t0 = time.perf_counter()
    if m % 32 == 0 and m % rb == 0:  # the hand schedule's 32-row tiles have no tail
        s, args = gemm_schedule(m, n, n, bn=bn, rb=rb)
        kernels["hand schedule (row tiles)"] = (
            templtune.build(s, args, target="llvm", name="gemm"), [a, b])
    kernels["dense fallback"] = (_template((m, n, n), None), [a, wt])
    kernels["dense log"] = (_template((m, n, n), logs), [a, wt])
    kernels[f"dense prepacked {pb} fallback"] = (_template((m, n, n, pb), None),
                                                 [a, pack_dense(pb)(wt)])
    print(f"build: {time.perf_counter() - t0:.1f} s (hand: bn={bn}, rb={rb}; "
          f"cpu={cc.host_spec().cpu}; logs: {', '.join(logs) or 'none'})")
    expected = a @ b
    outs = {k: np.zeros((m, n), np.float32) for k in kernels}
    for k, (mod, ins) in kernels.items():
        mod(*ins, outs[k])
        np.testing.assert_allclose(outs[k], expected, rtol=1e-4, err_msg=k)
    flop = 2.0 * m * n * n
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    for th in opts.threads:
        clock = _timer(th)
        times: dict[str, list[float]] = {k: [] for k in [*kernels, "numpy"]}
        peak: list[float] = []
        with threadpool_limits(limits=th):
            a @ b  # warm-up
            for _ in range(opts.rounds):
                for k, (mod, ins) in kernels.items():
                    mod.set_num_threads(th)
                    time.sleep(opts.settle)
                    t = clock()
                    for _ in range(opts.number):
                        mod(*ins, outs[k])
                    times[k].append((clock() - t) / opts.number)
                time.sleep(opts.settle)
                t = clock()
                for _ in range(opts.number):
                    np.matmul(a, b)
                times["numpy"].append((clock() - t) / opts.number)
                peak.append(fma_peak(th, 0.1, cpu_time=th == 1))
        g_peak = statistics.median(peak)
        what = "thread CPU time" if th == 1 else "wall time"
        print(f"\n{th} thread(s), {what}, {opts.rounds} rounds x {opts.number} calls, medians "
              "(/numpy: of the per-round ratios); "
              f"FMA peak {g_peak:.1f} GFLOPS; load average {os.getloadavg()[0]:.1f}")
        print(f"{'kernel':>28} {'GFLOPS':>7} {'max':>7} {'/numpy':>7} {'% peak':>7} "
              f"{'p/round':>7}")
        for k, ts in times.items():
            g = flop / statistics.median(ts) / 1e9
            # the median of the per-round ratios: each round's kernel and numpy saw one load
            ratio = statistics.median(n_t / t for t, n_t in zip(ts, times["numpy"]))
            # likewise against the peak timed in the same round (the host's speed drifts)
            of_peak = statistics.median(flop / t / 1e9 / p for t, p in zip(ts, peak))
            print(f"{k:>28} {g:>7.1f} {flop / min(ts) / 1e9:>7.1f} {ratio:>7.2f} "
                  f"{100 * g / g_peak:>6.0f}% {100 * of_peak:>6.0f}%")
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
