"""``templtune demo``: tune the seed tutorial's ResNet layer on this CPU and check the result.

Tunes ``conv2d_nchw`` for the last ResNet 3x3 layer (batch 1, 512x7x7 input, 512 filters 3x3,
stride 1, pad 1), leaves the log in the user's cache folder (``$XDG_CACHE_HOME/templtune``,
default ``~/.cache/templtune``; never inside the package checkout) and says where, applies the best config with
``apply_history_best``, checks the kernel against numpy and prints its GFLOPS next to numpy's
im2col + matmul measured on the same machine in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from templtune.cli.main import CliError, command
from templtune.cli.tune_cmd import (
    check_log_path,
    create_task,
    parse_int_list,
    positive_int,
    print_summary,
    tune_task,
    tuner_names,
)

WORKLOAD = (1, 7, 7, 512, 512, 3, 3, 1, 1)


def cache_dir() -> Path:
    """templtune's folder for files the user did not name: ``$XDG_CACHE_HOME/templtune``,
    else ``~/.cache/templtune``."""
    from templtune import config

    base = config.get("XDG_CACHE_HOME") or Path(os.path.expanduser("~")) / ".cache"
    return Path(base) / "templtune"


def im2col_conv(data: np.ndarray, kernel: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW x OIHW convolution as numpy im2col + one matmul (the peer measured by the demo)."""
    n, ci, h, w = data.shape
    co, _, kh, kw = kernel.shape
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]  # n, ci, oh, ow, kh, kw
    oh, ow = win.shape[2], win.shape[3]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, ci * kh * kw)
    out = cols @ kernel.reshape(co, -1).T  # (n*oh*ow, co)
    return out.reshape(n, oh, ow, co).transpose(0, 3, 1, 2)


def expected_shape(wl: tuple[int, ...]) -> tuple[int, int, int, int]:
    """NCHW output shape of a conv2d workload ``N,H,W,CO,CI,KH,KW,stride,padding``."""
    n, h, w, co, _, kh, kw, s, p = wl
    return n, co, (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1


def _median_time(fn: Any, rounds: int, number: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return statistics.median(times)


def cmd_demo(args: argparse.Namespace) -> int:
    import templtune
    from templtune import autotvm
    from templtune.topi.testing import conv2d_nchw_python

    name = args.template
    wl = parse_int_list(args.args) if args.args else WORKLOAD
    if len(wl) != 9:
        raise CliError(f"--args: the demo takes N,H,W,CO,CI,KH,KW,stride,padding (9 integers), "
                       f"got {len(wl)}")
    task = create_task(name, wl, "llvm")
    if args.log is None:
        args.log = check_log_path(cache_dir() / f"demo_{name}.log", create_parent=True)
    what = " (ResNet last 3x3 layer)" if wl == WORKLOAD else ""
    print(f"tuning {name}{wl}{what} with {args.tuner}, "
          f"{args.n_trial} trials; log: {args.log}")
    summary = tune_task(task, tuner=args.tuner, n_trial=args.n_trial, log=args.log,
                        early_stopping=args.early_stopping, seed=args.seed,
                        number=args.number, repeat=args.repeat, progress=not args.no_progress)
    print_summary(task, summary)
    if summary.best_config is None:
        raise CliError("no trial succeeded; rerun with -v -v to see why")

    from templtune.autotvm import strategy

    with autotvm.apply_history_best(str(args.log)):
        s, arg_bufs = strategy.instantiate(strategy.Implementation(name, wl), "llvm")
    mod = templtune.build(s, arg_bufs, target="llvm")

    n, h, w, co, ci, kh, kw, stride, pad = wl
    rng = np.random.default_rng(args.seed)
    data = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    kernel = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    out = np.zeros(expected_shape(wl), np.float32)
    mod(data, kernel, out)
    expected = conv2d_nchw_python(data, kernel, stride, pad)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(im2col_conv(data, kernel, stride, pad), expected, rtol=1e-3,
                               atol=1e-3)
    print("check:       the tuned kernel matches numpy")

    ev = mod.time_evaluator(mod.entry_name, templtune.cpu(), number=args.number, repeat=1)
    ours, theirs = [], []
    for _ in range(args.rounds):  # interleaved, so both see the same machine load
        # NOTE: OpenBLAS's worker threads spin for a while after numpy's matmul returns and
        # would steal the cores from our parallel loop; let them go idle first.
        time.sleep(0.2)
        ours.append(ev(data, kernel, out).results[0])
        theirs.append(_median_time(lambda: im2col_conv(data, kernel, stride, pad), 1,
                                   args.number))
    flop = task.flop
    g_ours = flop / statistics.median(ours) / 1e9
    g_np = flop / statistics.median(theirs) / 1e9
    print(f"templtune:   {g_ours:8.2f} GFLOPS ({statistics.median(ours) * 1e3:.3f} ms)")
    print(f"numpy:       {g_np:8.2f} GFLOPS ({statistics.median(theirs) * 1e3:.3f} ms, "
          "im2col + matmul)")
    print(f"ratio:       {g_ours / g_np:8.2f}x numpy")
    return 0


@command("demo", help="tune the ResNet 512x7x7 3x3 layer here, check it, compare with numpy")
def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--template", choices=("conv2d_nchw", "conv2d_winograd"),
                        default="conv2d_nchw", help="template to tune (default conv2d_nchw)")
    parser.add_argument("--args", default=None,
                        help="another conv2d workload N,H,W,CO,CI,KH,KW,stride,padding "
                             "(default the ResNet layer 1,7,7,512,512,3,3,1,1)")
    parser.add_argument("--tuner", choices=tuner_names(), default="xgb", help="search strategy")
    parser.add_argument("--n-trial", type=positive_int, default=64,
                        help="configs to measure (default 64: a few minutes)")
    parser.add_argument("--early-stopping", type=positive_int, default=32)
    parser.add_argument("--log", default=None,
                        help="log to append to (default ~/.cache/templtune/demo_TEMPLATE.log, "
                             "under $XDG_CACHE_HOME when set)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--number", type=positive_int, default=4)
    parser.add_argument("--repeat", type=positive_int, default=3)
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="interleaved timing rounds of the comparison (default 5)")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=cmd_demo)
