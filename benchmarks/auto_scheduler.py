"""Template-free auto-scheduler vs the best AutoTVM x86 template, under the same trial budget.

Workloads: the seed tutorial's conv2d layer (ResNet-50 last layer: 1x512x7x7, 512 3x3 filters,
stride 1, pad 1) + bias + relu, and dense 1024^3 (``out = data @ weight.T``). For each, in one
run on this machine:

* auto_scheduler (SketchPolicy + XGBModel): best GFLOPS after each budget in ``--trials``;
* AutoTVM (XGBTuner on ``templates/x86``: ``conv2d_nchw`` / ``dense``), same budgets;
* peers: numpy (dense) and PyTorch (both, when installed);
* wall time per trial of both tuners, and the ratio auto_scheduler / template.

Run: ``python benchmarks/auto_scheduler.py [--workload conv|dense|all] [--trials 64,200,500]
[--per-round 16] [--no-autotvm] [--json]``. Absolute numbers on a shared 2-core machine are noise;
read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

from templtune import auto_scheduler, te, topi

CONV = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
DENSE = (1024, 1024, 1024)


@auto_scheduler.register_workload("bench_conv2d_bias_relu", override=True)
def conv2d_bias_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, 1)
    return [data, kernel, bias, topi.nn.relu(conv + bias)]


@auto_scheduler.register_workload("bench_dense", override=True)
def dense(M, N, K):
    data = te.placeholder((M, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    k = te.reduce_axis((0, K), name="k")
    out = te.compute((M, N), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k), name="out")
    return [data, weight, out]


class _Curve:
    """Best GFLOPS after each measured trial."""

    def __init__(self, flop: float) -> None:
        self.flop = flop
        self.best: list[float] = []
        self.t0 = time.perf_counter()

    def add(self, costs: list[float | None]) -> None:
        for c in costs:
            g = self.flop / c / 1e9 if c else 0.0
            self.best.append(max(g, self.best[-1] if self.best else 0.0))

    def at(self, n: int) -> float | None:
        return self.best[min(n, len(self.best)) - 1] if self.best else None


def tune_auto_scheduler(name: str, args: tuple, budget: int, per_round: int, n_parallel: int,
                        log: str) -> tuple[_Curve, float]:
    task = auto_scheduler.SearchTask(func=name, args=args, target="llvm")
    curve = _Curve(task.compute_dag.flop_ct)

    class Track:
        def callback(self, policy: Any, inputs: list, results: list) -> None:
            curve.add([r.mean_cost if r.error_no == 0 else None for r in results])

    opt = auto_scheduler.TuningOptions(
        num_measure_trials=budget, num_measures_per_round=per_round, verbose=0,
        builder=auto_scheduler.LocalBuilder(n_parallel=n_parallel),
        # NOTE: auto_scheduler's runner defaults (number=3, repeat=1, min_repeat_ms=100) with a
        # longer timeout: slow early candidates must still be measured for the cost model.
        runner=auto_scheduler.LocalRunner(timeout=30),
        measure_callbacks=[auto_scheduler.RecordToFile(log), Track()])
    t0 = time.perf_counter()
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.XGBModel(num_warmup_sample=32),
                                         seed=0, verbose=0)
    task.tune(opt, search_policy=policy)
    return curve, (time.perf_counter() - t0) / max(1, len(curve.best))


def tune_autotvm(template: str, args: tuple, budget: int, n_parallel: int) -> tuple[_Curve, float]:
    from templtune.templates import load

    from templtune import autotvm

    load("x86")
    from templtune.autotvm.tuner import XGBTuner

    task = autotvm.task.create(template, args=args, target="llvm")
    curve = _Curve(float(task.flop))

    def track(tuner: Any, inputs: list, results: list) -> None:
        curve.add([r.mean_cost if r.ok else None for r in results])

    mo = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=n_parallel),
                                runner=autotvm.LocalRunner(timeout=30, number=4, repeat=3,
                                                           min_repeat_ms=50,
                                                           cooldown_interval=0.0))
    t0 = time.perf_counter()
    XGBTuner(task, seed=0).tune(n_trial=min(budget, len(task.config_space)), measure_option=mo,
                                callbacks=[track])
    return curve, (time.perf_counter() - t0) / max(1, len(curve.best))


def peers(kind: str) -> dict[str, float]:
    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    if kind == "dense":
        m, n, k = DENSE
        a = rng.random((m, k), dtype=np.float32)
        w = rng.random((n, k), dtype=np.float32)
        flop = 2.0 * m * n * k
        out["numpy"] = flop / _best_time(lambda: a @ w.T) / 1e9
        try:
            import torch

            ta, tw = torch.from_numpy(a), torch.from_numpy(w)
            out["pytorch"] = flop / _best_time(lambda: ta @ tw.T) / 1e9
        except ImportError:
            pass
    else:
        n_, h, w_, co, ci, kh, kw, _, _ = CONV
        flop = 2.0 * n_ * co * h * w_ * ci * kh * kw + 2 * n_ * co * h * w_
        try:
            import torch

            x = torch.rand(n_, ci, h, w_)
            wt = torch.rand(co, ci, kh, kw)
            b = torch.rand(1, co, 1, 1)
            f = torch.nn.functional
            out["pytorch"] = flop / _best_time(
                lambda: torch.relu(f.conv2d(x, wt, padding=1) + b)) / 1e9
        except ImportError:
            pass
    return out


def _best_time(fn: Any, repeat: int = 20) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=["conv", "dense", "all"], default="all")
    p.add_argument("--trials", default="64,200,500", help="comma-separated budgets")
    p.add_argument("--per-round", type=int, default=16)
    p.add_argument("--n-parallel", type=int, default=os.cpu_count() or 2)
    p.add_argument("--no-autotvm", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    budgets = sorted(int(x) for x in args.trials.split(","))
    work = ["conv", "dense"] if args.workload == "all" else [args.workload]
    tmp = tempfile.mkdtemp(prefix="templtune_as_bench_")
    report: dict[str, Any] = {}
    for kind in work:
        name, wargs = (("bench_conv2d_bias_relu", CONV) if kind == "conv"
                       else ("bench_dense", DENSE))
        tmpl, targs = (("conv2d_nchw", CONV) if kind == "conv"
                       else ("dense", DENSE))
        print(f"== {kind}: auto_scheduler, {budgets[-1]} trials", flush=True)
        as_curve, as_tpt = tune_auto_scheduler(name, wargs, budgets[-1], args.per_round,
                                               args.n_parallel, os.path.join(tmp, f"{kind}.json"))
        row: dict[str, Any] = {"auto_scheduler": {b: as_curve.at(b) for b in budgets},
                               "auto_scheduler_s_per_trial": as_tpt}
        if not args.no_autotvm:
            print(f"== {kind}: AutoTVM template {tmpl}, {budgets[-1]} trials", flush=True)
            at_curve, at_tpt = tune_autotvm(tmpl, targs, budgets[-1], args.n_parallel)
            row["autotvm"] = {b: at_curve.at(b) for b in budgets}
            row["autotvm_s_per_trial"] = at_tpt
        row["peers"] = peers(kind)
        report[kind] = row
        print(f"{'trials':>8} {'auto_sched GF':>14} {'template GF':>12} {'ratio':>7}")
        for b in budgets:
            a = row["auto_scheduler"][b]
            t = row.get("autotvm", {}).get(b)
            ratio = f"{a / t:7.2f}" if a and t else "      -"
            print(f"{b:>8} {a or 0:14.2f} {t or 0:12.2f} {ratio}")
        print(f"s/trial: auto_scheduler {as_tpt:.2f}"
              + (f", template {row['autotvm_s_per_trial']:.2f}" if "autotvm" in row else ""))
        print("peers (GFLOPS): " + ", ".join(f"{k} {v:.1f}" for k, v in row["peers"].items()))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
