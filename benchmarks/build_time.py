"""Build-time benchmark: schedule -> callable module for the seed conv2d, split by phase.

Workload (the seed tutorial's): batch 1, 512 input channels, 7x7 image, 512 filters of 3x3,
stride 1, padding 1, float32; a tiled CPU schedule (see :func:`conv2d_schedule`).

Each repetition rebuilds from scratch with the compile cache cleared, and reports medians (wall
time, and CPU time of this process, which is what to read on a shared, loaded machine) of:
``lower`` (schedule -> loop IR), ``codegen`` (loop IR -> LLVM IR text), ``llvm`` (parse + verify,
O3, machine code, JIT load) and ``total``. Target: total <= 150 ms. Run::

    python benchmarks/build_time.py [--reps 7]
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

import templtune
from templtune import te, topi
from templtune.build_module import build_llvm
from templtune.codegen.llvm import compile as cc
from templtune.codegen.llvm.build import make_header
from templtune.codegen.llvm.pool import parallel_runtime
from templtune.codegen.llvm.render import render
from templtune.runtime.module import Module
from templtune.topi.testing import conv2d_nchw_python


def conv2d_schedule(n=1, c=512, hw=7, f=512, k=3, pad=1, vf=16, rcf=4):
    """Direct conv2d computed in a blocked layout (``NCHW[vf]c``, as x86 templates do) and
    unpacked to NCHW: filters are packed so ``vf`` output channels are contiguous, the
    accumulator tile is one output row x ``vf`` channels (registers), the channel reduction is
    split and unrolled, filter blocks run in parallel."""
    data = te.placeholder((n, c, hw, hw), name="data")
    kernel = te.placeholder((f, c, k, k), name="kernel")
    padded = topi.nn.pad(data, (0, 0, pad, pad), (0, 0, pad, pad), name="pad_temp")
    kpack = te.compute((f // vf, c, k, k, vf),
                       lambda fo, rc, ry, rx, fi: kernel[fo * vf + fi, rc, ry, rx], name="kpack")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, k), name="ry")
    rx = te.reduce_axis((0, k), name="rx")
    convp = te.compute(
        (n, f // vf, hw, hw, vf),
        lambda b, fo, y, x, fi: te.sum(padded[b, rc, y + ry, x + rx] * kpack[fo, rc, ry, rx, fi],
                                       axis=[rc, ry, rx]), name="conv_packed")
    out = te.compute((n, f, hw, hw), lambda b, ff, y, x: convp[b, ff // vf, y, x, ff % vf],
                     name="conv2d")
    s = te.create_schedule(out.op)
    s[padded].compute_inline()
    fo_, _, _, _, fi_ = s[kpack].op.axis
    s[kpack].parallel(fo_)
    s[kpack].vectorize(fi_)
    cl = s.cache_write(convp, "global")
    b, fo, y, x, fi = s[convp].op.axis
    s[convp].parallel(fo)
    s[convp].vectorize(fi)
    s[cl].compute_at(s[convp], y)
    _, _, _, xc, fc = s[cl].op.axis
    rc_, ry_, rx_ = s[cl].op.reduce_axis
    rco, rci = s[cl].split(rc_, factor=rcf)
    s[cl].reorder(rco, ry_, rx_, rci, xc, fc)
    s[cl].unroll(rci)
    s[cl].unroll(xc)
    s[cl].vectorize(fc)
    ob, off, _, _ = s[out].op.axis
    s[out].parallel(off)
    return s, [data, kernel, out]


def build_once(target: templtune.target.Target) -> tuple[dict[str, tuple[float, float]], Module]:
    """One cold build; per phase (wall seconds, CPU seconds of this process)."""
    clock = (time.perf_counter, time.process_time)
    t0 = [c() for c in clock]
    s, args = conv2d_schedule()
    func = templtune.lower(s, args, name="conv2d")
    t1 = [c() for c in clock]
    spec = cc.machine_spec(target)
    rendered = render(func, runtime=parallel_runtime(spec), x86=spec.is_x86)
    t2 = [c() for c in clock]
    obj = cc.compile_ir(rendered.ir, spec)
    mod = Module(obj, make_header(rendered, spec))
    t3 = [c() for c in clock]
    span = lambda a, b: (b[0] - a[0], b[1] - a[1])  # noqa: E731
    return {"lower": span(t0, t1), "codegen": span(t1, t2), "llvm": span(t2, t3),
            "total": span(t0, t3)}, mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    opts = ap.parse_args()
    target = templtune.target.Target("llvm")
    _, mod = build_once(target)  # warm-up: imports, LLVM initialisation, libgomp
    rng = np.random.default_rng(0)
    a = rng.random((1, 512, 7, 7), dtype=np.float32)
    w = rng.random((512, 512, 3, 3), dtype=np.float32)
    out = np.zeros((1, 512, 7, 7), np.float32)
    mod(a, w, out)
    np.testing.assert_allclose(out, conv2d_nchw_python(a, w, 1, 1), rtol=1e-4)
    runs = []
    for _ in range(opts.reps):
        cc.clear_cache()
        runs.append(build_once(target)[0])
    print(f"conv2d 1x512x7x7, 512x3x3, pad 1: median of {opts.reps} cold builds "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"  {'phase':>8}  {'wall ms':>8}  {'cpu ms':>7}")
    for phase in ("lower", "codegen", "llvm", "total"):
        wall = statistics.median(r[phase][0] for r in runs)
        cpu = statistics.median(r[phase][1] for r in runs)
        print(f"  {phase:>8}  {1e3 * wall:8.1f}  {1e3 * cpu:7.1f}")
    cc.clear_cache()
    t = {}
    build_llvm(templtune.lower(*conv2d_schedule(), name="c2"), target,
                                      timings=t)
    print("  llvm split: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in t.items()
                                       if k != "cache_hit"))
    r = mod.time_evaluator("conv2d", templtune.cpu(), number=5, repeat=3)(a, w, out)
    print(f"  kernel: {1e3 * r.median:.2f} ms, "
          f"{2 * 512 * 512 * 9 * 49 / r.median / 1e9:.1f} GFLOPS")


if __name__ == "__main__":
    main()
