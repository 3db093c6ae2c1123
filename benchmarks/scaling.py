"""Thread scaling of compute-bound kernels: 1 vs 2 threads, interleaved, with the machine's load.

Kernels: ``benchmarks/gemm.py``'s hand schedule (1024^3), the ``dense`` template at 1024^3 with
plain and pre-packed weights, and the seed's conv2d 1x512x7x7 -> 512 3x3 pad 1 (template
``conv2d_nchw``), each with its fallback config for this machine (what runs without tuning
records), or with the best record of ``--log`` files. Peers: numpy (OpenBLAS) for the dense
kernels. The FMA peak (explicit FMA chains, ``benchmarks/ops.py``) is measured in the same rounds.

Each round times every kernel at 1 and then 2 threads, ``--settle`` idle seconds before each
timing (spinning worker threads of the previous call stop first); medians over rounds. The load
average and the CPU share other processes took during the run are printed: on a shared machine
the 2-thread figures are only as good as the second core is free. Run::

    python benchmarks/scaling.py [--rounds 9] [--settle 0.1] [--log L ...]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.autotvm import strategy  # noqa: E402
from templtune.autotvm.task.space import FallbackConfigEntity  # noqa: E402

N = 1024
SEED = (1, 7, 7, 512, 512, 3, 3, 1, 1)


def _busy_ticks() -> int:
    with open("/proc/stat") as f:
        user, nice, system = (int(x) for x in f.readline().split()[1:4])
    return user + nice + system


def _template(name: str, args: tuple, logs: list[str]) -> Any:
    if logs:
        with autotvm.apply_history_best(logs):
            s, bufs = strategy.instantiate(strategy.Implementation(name, args), "llvm")
    else:
        task = autotvm.task.create(name, args, "llvm")
        with autotvm.ApplyConfig(FallbackConfigEntity()):
            s, bufs = task.func(*task.args)
    return templtune.build(s, bufs, target="llvm")


def kernels(logs: list[str]) -> dict[str, tuple[Any, list[np.ndarray], float]]:
    """label -> (module, arguments, flop)."""
    from gemm import gemm_schedule

    rng = np.random.default_rng(0)
    a = rng.random((N, N), dtype=np.float32)
    w = rng.random((N, N), dtype=np.float32)
    out: dict[str, tuple[Any, list[np.ndarray], float]] = {}
    s, bufs = gemm_schedule(N, N, N, bn=32, rb=8)
    out["gemm.py schedule 1024^3"] = (templtune.build(s, bufs, target="llvm"),
                                      [a, w, np.zeros((N, N), np.float32)], 2.0 * N ** 3)
    for label, args in (("dense 1024^3", (N, N, N)), ("dense 1024^3 prepacked", (N, N, N, 32))):
        t = strategy.weight_transform("dense", args)
        mod = _template("dense", args, logs)
        arrays = [a, t(w) if t else w, np.zeros((N, N), np.float32)]
        mod(*arrays)
        np.testing.assert_allclose(arrays[2], a @ w.T, rtol=1e-3)
        out[label] = (mod, arrays, 2.0 * N ** 3)
    d = rng.standard_normal((1, 512, 7, 7)).astype(np.float32)
    k = rng.standard_normal((512, 512, 3, 3)).astype(np.float32)
    out["conv 512x7x7 3x3"] = (_template("conv2d_nchw", SEED, logs),
                               [d, k, np.zeros((1, 512, 7, 7), np.float32)],
                               2.0 * 512 * 49 * 512 * 9)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--settle", type=float, default=0.1)
    ap.add_argument("--log", nargs="*", default=[], help="tuning logs (default: fallbacks)")
    opts = ap.parse_args()
    from ops import fma_peak

    ks = kernels(opts.log)
    a, w = ks["dense 1024^3"][1][:2]
    timers: dict[str, Callable[[], float]] = {}
    for label, (mod, arrays, flop) in ks.items():
        ev = mod.time_evaluator(mod.entry_name, templtune.cpu(), number=3, repeat=1)
        timers[label] = (lambda ev=ev, arrays=arrays, flop=flop:
                         flop / ev(*arrays).results[0] / 1e9)

    def numpy_gflops() -> float:
        t = time.perf_counter()
        for _ in range(3):
            np.matmul(a, w.T)
        return 3 * 2.0 * N ** 3 / (time.perf_counter() - t) / 1e9

    res: dict[tuple[str, int], list[float]] = {}
    load0, busy0, own0, wall0 = os.getloadavg()[0], _busy_ticks(), time.process_time(), \
        time.perf_counter()
    for _ in range(opts.rounds):
        for th in (1, 2):
            for label, (mod, _, _) in ks.items():
                mod.set_num_threads(th)
                time.sleep(opts.settle)
                res.setdefault((label, th), []).append(timers[label]())
            with threadpool_limits(limits=th):
                time.sleep(opts.settle)
                res.setdefault(("numpy 1024^3", th), []).append(numpy_gflops())
            time.sleep(opts.settle)
            res.setdefault(("FMA peak", th), []).append(fma_peak(th, 0.1))
    wall = time.perf_counter() - wall0
    others = ((_busy_ticks() - busy0) / os.sysconf("SC_CLK_TCK")
              - (time.process_time() - own0)) / wall
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"cpu: {templtune.target.capabilities(templtune.target.Target('llvm')).cpu}, "
          f"{os.cpu_count()} cores; {opts.rounds} rounds, settle {opts.settle} s; "
          f"{'logs: ' + ' '.join(opts.log) if opts.log else 'fallback configs'}")
    print(f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; other processes used "
          f"{others:.2f} of the 2 cores during the run")
    print(f"{'kernel':<26} {'1 thr GFLOPS':>12} {'2 thr GFLOPS':>12} {'2/1':>5} "
          f"{'% peak 1t':>9} {'/numpy 1t':>9} {'/numpy 2t':>9}")
    for label in [*ks, "numpy 1024^3", "FMA peak"]:
        g1, g2 = med[label, 1], med[label, 2]
        ratio = (f"{g1 / med['numpy 1024^3', 1]:>9.2f} {g2 / med['numpy 1024^3', 2]:>9.2f}"
                 if "1024" in label else "")
        print(f"{label:<26} {g1:>12.1f} {g2:>12.1f} {g2 / g1:>5.2f} "
              f"{100 * g1 / med['FMA peak', 1]:>8.0f}% {ratio}")
    print("per-round 2/1 ratios (median): " + ", ".join(
        f"{label}: {statistics.median(b / a_ for a_, b in zip(res[label, 1], res[label, 2])):.2f}"
        for label in list(ks) + ["numpy 1024^3", "FMA peak"]))


if __name__ == "__main__":
    main()
