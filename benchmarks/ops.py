"""Operator benchmark: tuned templtune kernels against their peers, same run, same machine.

Workloads: dense 1024^3, dense 1x512 -> 1000, dense 1x2048 -> 1000, dense 197x768 -> 768 and
batch_matmul 12x197x64 by 64 (a ViT's 197 tokens, a prime row count) and the attention scores
12x197 by 197x64 and 12x577 by 577x64 (prime columns too: 577 is a ViT-B/16's tokens at
384 x 384) (peer: numpy/OpenBLAS),
the seed's ResNet layer 1x512x7x7 -> 512 3x3, conv2d 1x64x56x56 -> 64 3x3 and the ResNet stem
1x3x224x224 -> 64 7x7 s2 (peer: PyTorch CPU, if installed: ``pip install torch==2.13.0``).
The 3x3 layers also run the Winograd template (weights pre-transformed and blocked by
``WINO_KBLOCK`` output channels, as in inference), the stem and the 56x56 layer the
width-vectorized direct template ``conv2d_nchw_wvec``, and batch-1 dense and the convolutions
also run with weights packed ahead of time (``prepacked``).
Each templtune kernel uses the best config of the logs given (default: the shipped reference
log ``templates/logs/cpu/*.log``); a workload with no record runs its fallback config and is
marked ``(fallback)``. Under each workload, ``trials`` counts the tuning records of each
kernel's workload in the raw logs ``logs/pretune/*.log`` (the trial budget spent on it). The machine's FMA peak is measured with an
explicit FMA-chain kernel.

Timing: for each thread count, rounds interleave every kernel of a workload (templtune, peer),
each reporting the median over rounds, so all sides see the same machine load. With more than
one thread each timing starts after ``--settle`` idle seconds, so the previous kernel's
spin-waiting worker threads (OpenBLAS, OpenMP) do not compete for the cores.

Allocator: a templtune kernel allocates its intermediate buffers (packed data and weights,
Winograd tiles) on each call. glibc serves the large ones with fresh ``mmap`` pages, or trims
its heap after the call, so each call page-faults them in again (measured: ~1.7 of 3.9 ms of
the 56x56 Winograd kernel, ~0.5 ms of the direct one). TVM's runtime pools such workspaces; until
templtune's does, the benchmark (like the tuner's runner process) pins glibc's mmap/trim thresholds (``mallopt``, process-wide, so
the peers get the same allocator) and prints whether it did; ``--no-pin-malloc`` times the
default behaviour. Run::

    python benchmarks/ops.py [--rounds 7] [--threads 1 2] [--log L ...] [--only dense]
        [--no-pin-malloc]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import templtune
from templtune import autotvm
from templtune.autotvm import strategy
from templtune.autotvm.record import load_from_file

ROOT = Path(__file__).resolve().parents[1]

# (label, template, args, peer)
WORKLOADS = [
    ("dense 1024^3", "dense", (1024, 1024, 1024), "numpy"),
    ("dense 1x512->1000", "dense", (1, 1000, 512), "numpy"),
    ("dense 1x2048->1000", "dense", (1, 1000, 2048), "numpy"),
    ("dense 197x768->768", "dense", (197, 768, 768), "numpy"),
    ("bmm 12x197x64x64", "batch_matmul", (12, 197, 64, 64), "numpy"),
    ("bmm 12x197x197x64", "batch_matmul", (12, 197, 197, 64), "numpy"),
    ("bmm 12x577x577x64", "batch_matmul", (12, 577, 577, 64), "numpy"),
    ("conv 512x7x7 3x3", "conv2d_nchw", (1, 7, 7, 512, 512, 3, 3, 1, 1), "torch"),
    ("conv 64x56x56 3x3", "conv2d_nchw", (1, 56, 56, 64, 64, 3, 3, 1, 1), "torch"),
    ("stem 3x224x224 7x7s2", "conv2d_nchw", (1, 224, 224, 64, 3, 7, 7, 2, 3), "torch"),
]

#: workloads also timed with weights packed ahead of time (template argument ``prepacked``)
PREPACK = {
    (1, 1000, 512): 40, (1, 1000, 2048): 40, (1024, 1024, 1024): 16, (197, 768, 768): 16,
    # NOTE: 8-lane output-channel blocks: on AVX2 (16 ymm registers) a 16-lane block of a
    # 7-wide row spills, and 7x7 layers have no other row block.
    (1, 7, 7, 512, 512, 3, 3, 1, 1): 8, (1, 56, 56, 64, 64, 3, 3, 1, 1): 8,
    (1, 224, 224, 64, 3, 7, 7, 2, 3): 8,
}

#: output-channel block of the pre-transformed Winograd weights (template argument ``kblock``)
WINO_KBLOCK = {(1, 7, 7, 512, 512, 3, 3, 1, 1): 8, (1, 56, 56, 64, 64, 3, 3, 1, 1): 16}

#: other direct templates timed on a workload (same NCHW data, OIHW kernel, NCHW output)
VARIANTS = {
    (1, 224, 224, 64, 3, 7, 7, 2, 3): ["conv2d_nchw_wvec"],
    (1, 56, 56, 64, 64, 3, 3, 1, 1): ["conv2d_nchw_wvec"],
}


# ---------------------------------------------------------------------------- FMA peak
def _fma_ir(lanes: int, acc: int) -> str:
    vt = f"<{lanes} x float>"
    one = ", ".join(["float 1.0"] * lanes)
    x = ", ".join(["float 0x3FEFFFFFE0000000"] * lanes)  # 0.99999...
    y = ", ".join(["float 0x3E7AD7F2A0000000"] * lanes)  # 1e-7
    phis = "\n".join(f"  %a{i} = phi {vt} [<{one}>, %entry], [%b{i}, %loop]" for i in range(acc))
    fmas = "\n".join(f"  %b{i} = call {vt} @llvm.fma.v{lanes}f32({vt} %a{i}, {vt} <{x}>, "
                     f"{vt} <{y}>)" for i in range(acc))
    sums = [f"  %s0 = fadd {vt} %b0, %b1"]
    for i in range(2, acc):
        sums.append(f"  %s{i - 1} = fadd {vt} %s{i - 2}, %b{i}")
    return f"""
declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})
define void @fma_peak(i64 %n, ptr %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%inext, %loop]
{phis}
{fmas}
  %inext = add i64 %i, 1
  %c = icmp ult i64 %inext, %n
  br i1 %c, label %loop, label %exit
exit:
{chr(10).join(sums)}
  store {vt} %s{acc - 2}, ptr %out, align 4
  ret void
}}
"""


def fma_peak(threads: int, seconds: float = 0.3, cpu_time: bool = False) -> float:
    """GFLOPS of independent FMA chains on ``threads`` threads (the machine's FMA peak).
    ``cpu_time`` (1 thread only): run the chains on the calling thread and divide by its CPU
    time (``time.thread_time``), as kernels timed that way on a shared machine."""
    import llvmlite.binding as llvm

    try:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
    except Exception:  # noqa: BLE001 - newer llvmlite initializes itself
        pass
    feats = llvm.get_host_cpu_features()
    lanes = 16 if feats.get("avx512f", False) else 8
    acc = 12
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=feats.flatten(), opt=3)
    mod = llvm.parse_assembly(_fma_ir(lanes, acc))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(
        engine.get_function_address("fma_peak"))
    outs = [np.zeros(lanes, np.float32) for _ in range(threads)]
    per_iter = 2.0 * lanes * acc
    n = 1 << 16
    while True:  # calibrate so one call lasts ~seconds
        t = time.perf_counter()
        fn(n, outs[0].ctypes.data)
        dt = time.perf_counter() - t
        if dt > seconds / 4:
            break
        n *= 4
    n = int(n * seconds / dt)
    if cpu_time and threads == 1:
        t = time.thread_time()
        fn(n, outs[0].ctypes.data)
        return n * per_iter / (time.thread_time() - t) / 1e9
    workers = [threading.Thread(target=fn, args=(n, outs[k].ctypes.data)) for k in
               range(threads)]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    dt = time.perf_counter() - t
    _ = engine  # keep the JIT alive until here
    return threads * n * per_iter / dt / 1e9


def pin_malloc() -> bool:
    """Keep glibc from returning freed scratch buffers to the OS (see the module docstring);
    ``False`` where there is no glibc ``mallopt``."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    # NOTE: 32 MiB is glibc's largest mmap threshold on 64-bit hosts.
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20)
                and libc.mallopt(m_trim_threshold, 256 << 20))


# ---------------------------------------------------------------------------- kernels
def logged_workloads(logs: list[str]) -> set[tuple[str, tuple]]:
    """(template name, args) of every successful record in ``logs``."""
    out = set()
    for path in logs:
        for inp, res in load_from_file(path):
            if int(res.error_no) == 0:
                out.add((inp.task.name, tuple(inp.task.args)))
    return out


def build_tuned(template: str, args: tuple, logs: list[str]) -> Any:
    """The module of ``template(*args)`` under the best config of ``logs``."""
    with autotvm.apply_history_best(logs):
        s, bufs = strategy.instantiate(strategy.Implementation(template, args), "llvm")
    return templtune.build(s, bufs, target="llvm")


def pretransformed(template: str, args: tuple, weight: np.ndarray) -> np.ndarray:
    """``weight`` in the layout ``template(*args)`` takes (its registered weight transform)."""
    transform = strategy.weight_transform(template, args)
    assert transform is not None, f"{template}{args} takes the weight as is"
    return transform(weight)


def _torch_conv(data: np.ndarray, kernel: np.ndarray, stride: int, pad: int
                ) -> Callable[[], Any] | None:
    try:
        import torch
    except ImportError:
        return None
    d, k = torch.from_numpy(data), torch.from_numpy(kernel)

    def run() -> Any:
        with torch.no_grad():
            return torch.nn.functional.conv2d(d, k, stride=stride, padding=pad)

    return run


def _torch_threads(n: int) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(n)


def _timer(fn: Callable[[], Any], number: int) -> Callable[[], float]:
    def run() -> float:
        t = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t) / number

    return run


def bench_workload(label: str, template: str, args: tuple, peer: str, logs: list[str],
                   known: set, threads: list[int], rounds: int, number: int,
                   settle: float = 0.0, budget: dict | None = None) -> list[str]:
    rng = np.random.default_rng(0)
    flop = float(autotvm.task.create(template, args, "llvm").flop)
    kernels: dict[str, tuple[Any, list[np.ndarray]]] = {}
    keys: dict[str, tuple[str, tuple]] = {}  # kernel -> (template, args) of its log records
    notes = []
    if template == "dense":
        m, n, k = args
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        out = np.zeros((m, n), np.float32)
        kernels["templtune"] = (build_tuned(template, args, logs), [a, w, out])
        keys["templtune"] = ("dense", args)
        b = PREPACK.get(args)
        if b:  # weights packed once, outside the timed call (as an inference graph does)
            wp = pretransformed(template, (*args, b), w)
            kernels["prepacked"] = (build_tuned(template, (*args, b), logs),
                                    [a, wp, np.zeros_like(out)])
            keys["prepacked"] = ("dense", (*args, b))
            notes.append("" if ("dense", (*args, b)) in known else "(prepacked fallback)")
        expected = a @ w.T
        peer_fn: Callable[[], Any] | None = lambda: np.matmul(a, w.T)  # noqa: E731
        notes.append("" if ("dense", args) in known else "(fallback)")
    elif template == "batch_matmul":
        nb, m, n, k = args
        x = rng.standard_normal((nb, m, k)).astype(np.float32)
        y = rng.standard_normal((nb, n, k)).astype(np.float32)
        kernels["templtune"] = (build_tuned(template, args, logs),
                                [x, y, np.zeros((nb, m, n), np.float32)])
        keys["templtune"] = (template, args)
        expected = x @ y.transpose(0, 2, 1)
        peer_fn = lambda: np.matmul(x, y.transpose(0, 2, 1))  # noqa: E731
        notes.append("" if (template, args) in known else "(fallback)")
    else:
        bn, h, wd, co, ci, kh, kw, st, pd = args
        data = rng.standard_normal((bn, ci, h, wd)).astype(np.float32)
        kern = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
        oh, ow = (h + 2 * pd - kh) // st + 1, (wd + 2 * pd - kw) // st + 1
        out = np.zeros((bn, co, oh, ow), np.float32)
        kernels["templtune"] = (build_tuned(template, args, logs), [data, kern, out])
        keys["templtune"] = (template, args)
        notes.append("" if (template, args) in known else "(fallback)")
        b = PREPACK.get(args)
        if b:
            kp = pretransformed(template, (*args, b), kern)
            kernels["prepacked"] = (build_tuned(template, (*args, b), logs),
                                    [data, kp, np.zeros_like(out)])
            keys["prepacked"] = (template, (*args, b))
            notes.append("" if (template, (*args, b)) in known else "(prepacked fallback)")
        for alt in VARIANTS.get(args, []):
            kernels[alt] = (build_tuned(alt, args, logs), [data, kern, np.zeros_like(out)])
            keys[alt] = (alt, args)
            notes.append("" if (alt, args) in known else f"({alt} fallback)")
        from templtune.topi.testing import conv2d_nchw_python

        expected = conv2d_nchw_python(data, kern, st, pd)
        if kh == 3 and st == 1:
            # Winograd F(2x2) and F(4x4) with pre-transformed weights, blocked by WINO_KBLOCK
            # output channels ([alpha, alpha, CO/b, CI, b]).
            kb = WINO_KBLOCK.get(args, 8)
            for m in (2, 4):
                wl = (*args, m, kb)
                kp = pretransformed("conv2d_winograd", wl, kern)
                mod = build_tuned("conv2d_winograd", wl, logs)
                kernels[f"winograd F({m})"] = (mod, [data, kp, np.zeros_like(out)])
                keys[f"winograd F({m})"] = ("conv2d_winograd", wl)
                notes.append("" if ("conv2d_winograd", wl) in known else
                             f"(winograd F({m}) fallback)")
        peer_fn = _torch_conv(data, kern, st, pd)
        if peer_fn is None:
            notes.append("(PyTorch not installed)")
    for name, (mod, arrs) in kernels.items():
        mod(*arrs)
        np.testing.assert_allclose(arrs[-1], expected, rtol=2e-3, atol=2e-3,
                                   err_msg=f"{label} {name}")
    rows = []
    for th in threads:
        timers = {}
        for name, (mod, arrs) in kernels.items():
            mod.set_num_threads(th)
            ev = mod.time_evaluator(mod.entry_name, templtune.cpu(), number=number, repeat=1)
            timers[name] = (lambda ev=ev, arrs=arrs: ev(*arrs).results[0])
        if peer_fn is not None:
            timers[peer] = _timer(peer_fn, number)
        samples: dict[str, list[float]] = {k: [] for k in timers}
        with threadpool_limits(limits=th):
            _torch_threads(th)
            for f in timers.values():  # warm-up
                f()
            for _ in range(rounds):
                for k, f in timers.items():
                    if th > 1 and settle > 0:
                        # NOTE: OpenBLAS/OpenMP workers spin after a call; with as many threads
                        # as cores they would steal the next kernel's cores. Let them sleep.
                        time.sleep(settle)
                    samples[k].append(f())
        g = {k: flop / statistics.median(v) / 1e9 for k, v in samples.items()}
        ours = max(v for k, v in g.items() if k != peer)
        ratio = f"{ours / g[peer]:.2f}" if peer in g else "-"
        cols = "  ".join(f"{k}={v:.1f}" for k, v in g.items())
        rows.append(f"{label:<22} {th:>2}  {cols}  ratio={ratio} {' '.join(n for n in notes if n)}")
    if budget is not None:
        rows.append(f"{'':<22}    trials: " + "  ".join(
            f"{k}={budget.get(v, 0)}" for k, v in keys.items()))
    return rows


def trial_budget(raw_logs: list[str]) -> dict[tuple[str, tuple], int]:
    """Trials spent per workload ((template name, args) -> records) in the raw tuning logs."""
    out: dict[tuple[str, tuple], int] = {}
    for path in raw_logs:
        for inp, _ in load_from_file(path):
            key = (inp.task.name, tuple(inp.task.args))
            out[key] = out.get(key, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=5, help="calls per round and kernel")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--log", nargs="*", default=None,
                    help="tuning logs (default: the shipped reference templates/logs/cpu/*.log)")
    ap.add_argument("--only", default=None, help="only workloads whose label contains this")
    ap.add_argument("--settle", type=float, default=0.2,
                    help="seconds to idle before each multi-threaded timing (peers' spinning "
                         "worker threads go to sleep)")
    ap.add_argument("--no-pin-malloc", action="store_true",
                    help="leave glibc's mmap/trim thresholds at their defaults")
    opts = ap.parse_args()
    pinned = False if opts.no_pin_malloc else pin_malloc()
    strategy.load_templates()
    # NOTE: the reference log only: its records were re-timed in interleaved rounds
    # (logs/rerank.py); a raw log's lucky single measurement would otherwise win.
    logs = opts.log if opts.log is not None else sorted(
        glob.glob(str(ROOT / "templates/logs/cpu/*.log")))
    known = logged_workloads(logs)
    budget = trial_budget(sorted(glob.glob(str(ROOT / "logs/pretune/*.log"))))
    print(f"logs: {len(logs)} files, {len(known)} workloads; cpu: "
          f"{__import__('llvmlite.binding', fromlist=['x']).get_host_cpu_name()}; "
          f"malloc thresholds pinned: {pinned}")
    for th in opts.threads:
        print(f"FMA peak, {th} thread(s): {fma_peak(th):.1f} GFLOPS")
    print("GFLOPS (median of interleaved rounds); ratio = best templtune / peer")
    for label, template, args, peer in WORKLOADS:
        if opts.only and opts.only not in label:
            continue
        for row in bench_workload(label, template, args, peer, logs, known, opts.threads,
                                  opts.rounds, opts.number, opts.settle, budget):
            print(row, flush=True)


if __name__ == "__main__":
    main()
