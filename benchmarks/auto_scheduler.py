"""Template-free auto-scheduler vs the best AutoTVM x86 template, under the same trial budget.

Workloads: the seed tutorial's conv2d layer (ResNet-50 last layer: 1x512x7x7, 512 3x3 filters,
stride 1, pad 1) + bias + relu, and dense 1024^3 (``out = data @ weight.T``). For each, in one
run on this machine:

* auto_scheduler (SketchPolicy + XGBModel): best GFLOPS after each budget in ``--trials``;
* AutoTVM (XGBTuner on ``templates/x86``: ``conv2d_nchw`` / ``dense``), same budgets;
* peers: numpy (dense) and PyTorch (both, when installed);
* wall time per trial of both tuners, and the ratio auto_scheduler / template.

Tuning measures the kernels at ``--tune-threads`` (1) thread(s). At the end, the best kernel of
each tuner after each budget and the peers are re-timed in the same process, interleaved round
by round (median of ``--rounds``) at 1 thread; those after the largest budget also at 2
threads. The per-budget verdict is the re-timed ratio.

The template's conv2d computes the convolution only; the auto-scheduler's workload adds bias
and relu (each counts its own FLOPs). Both pack/re-lay the constant weight inside the kernel
(the template's packing stage; the auto-scheduler's layout rewrite, INSERT_TRANSFORM_STAGE).

The auto-scheduler gets the layer in NHWC (kernel HWIO) by default: the layout TVM, and the seed's
x86 network tutorial, convert convolutions to for the auto-scheduler on a CPU (its register block
then vectorizes the output channels; in NCHW it can only vectorize the 7-wide output rows).
``--conv-layout nchw`` gives it the NCHW layer instead; ``--conv-template conv2d_nhwc`` compares
the NHWC template instead of ``conv2d_nchw`` (the fastest x86 template for this layer).

Run: ``python benchmarks/auto_scheduler.py [--workload conv|dense|all] [--trials 64,200,500]
[--per-round 16] [--tune-threads 1] [--rounds 15] [--no-autotvm] [--conv-layout nhwc|nchw]
[--json]``; both tuners' logs stay in the printed directory, and ``--from-logs DIR`` re-times
an earlier run's kernels without tuning again (e.g. once the machine is quiet). Absolute numbers
on a shared 2-core machine are noise; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from templtune import auto_scheduler

# NOTE: as sample_efficiency.py does: the sibling import below then works however this file is
# loaded (run as a script, or imported by a caller that did not put benchmarks/ on the path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from auto_scheduler_workloads import (  # noqa: E402  (importing registers the workloads)
    CONV,
    CONV_WORKLOADS,
    DENSE,
    # NOTE: re-exported: as_cost_model.py and lower_time.py import it from this module.
    conv2d_bias_relu,  # noqa: F401
    conv2d_nhwc_bias_relu,  # noqa: F401
    dense,  # noqa: F401
)

#: how both tuners measure a candidate while tuning (the mean of ``repeat`` repeats ranks it)
RUNNER = {"number": 4, "repeat": 3, "min_repeat_ms": 50}
#: back-to-back calls per contender and round; a round keeps the fastest. On a shared machine a
#: call that gets descheduled is an outlier only upwards, so the minimum of a short burst
#: estimates the kernel's own time, and the median over rounds removes drift.
BURST = 3


class _Curve:
    """Best GFLOPS after each measured trial, and which candidate it was."""

    def __init__(self, flop: float) -> None:
        self.flop = flop
        self.best: list[float] = []
        self.arg: list[Any] = []  # the best candidate (state / config) after each trial
        self.t0 = time.perf_counter()

    def add(self, costs: list[float | None], cands: list[Any]) -> None:
        for c, x in zip(costs, cands):
            g = self.flop / c / 1e9 if c else 0.0
            if not self.best or g > self.best[-1]:
                self.best.append(g)
                self.arg.append(x)
            else:
                self.best.append(self.best[-1])
                self.arg.append(self.arg[-1])

    def at(self, n: int) -> float | None:
        return self.best[min(n, len(self.best)) - 1] if self.best else None

    def best_at(self, n: int) -> Any:
        """The best candidate after ``n`` trials; None before one has succeeded."""
        i = min(n, len(self.arg)) - 1
        return self.arg[i] if self.arg and self.best[i] > 0 else None


def tune_auto_scheduler(name: str, args: tuple, budget: int, per_round: int, n_parallel: int,
                        log: str, warmup: int = 100, seed: int = 0) -> tuple[_Curve, float, Any]:
    task = auto_scheduler.SearchTask(func=name, args=args, target="llvm")
    curve = _Curve(task.compute_dag.flop_ct)

    class Track:
        def callback(self, policy: Any, inputs: list, results: list) -> None:
            curve.add([r.mean_cost if r.error_no == 0 else None for r in results],
                      [i.state for i in inputs])

    opt = auto_scheduler.TuningOptions(
        num_measure_trials=budget, num_measures_per_round=per_round, verbose=0,
        builder=auto_scheduler.LocalBuilder(n_parallel=n_parallel),
        # NOTE: the same measurement as the template tuner's (number=4, repeat=3,
        # min_repeat_ms=50; the mean of 3 repeats picks each tuner's best) with a 15 s timeout
        # (both tuners): slow early candidates are still measured for the cost model; hopeless
        # ones do not eat the run's wall time.
        runner=auto_scheduler.LocalRunner(timeout=15, number=RUNNER["number"],
                                          repeat=RUNNER["repeat"],
                                          min_repeat_ms=RUNNER["min_repeat_ms"]),
        measure_callbacks=[auto_scheduler.RecordToFile(log), Track()])
    t0 = time.perf_counter()
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.XGBModel(num_warmup_sample=warmup),
                                         seed=seed, verbose=0)
    task.tune(opt, search_policy=policy)
    return curve, (time.perf_counter() - t0) / max(1, len(curve.best)), task


def curve_from_log(name: str, args: tuple, log: str) -> tuple[_Curve, Any]:
    """The auto-scheduler's curve rebuilt from its record log (records are in trial order)."""
    from templtune.auto_scheduler.measure_record import RecordReader

    task = auto_scheduler.SearchTask(func=name, args=args, target="llvm")
    curve = _Curve(task.compute_dag.flop_ct)
    for inp, res in RecordReader(log):
        if inp.task.workload_key == task.workload_key:
            curve.add([res.mean_cost if res.error_no == 0 else None], [inp.state])
    return curve, task


def _autotvm_task(template: str, args: tuple) -> Any:
    from templtune import autotvm
    from templtune.templates import load

    load("x86")
    return autotvm.task.create(template, args=args, target="llvm")


def autotvm_curve_from_log(template: str, args: tuple, log: str) -> tuple[_Curve, Any]:
    """The template tuner's curve rebuilt from its record log. A record whose config the
    template's current space no longer has (a log older than a knob's change) counts as a
    failed trial: it used a trial of the budget, and it cannot be rebuilt."""
    from templtune.autotvm.record import load_from_file
    from templtune.autotvm.record_checks import check_config

    task = _autotvm_task(template, args)
    curve = _Curve(float(task.flop))
    stale = 0
    for inp, res in load_from_file(log):
        fits = check_config(task.config_space, inp.config) is None
        stale += not fits
        curve.add([res.mean_cost if res.ok and fits else None], [inp.config])
    if stale:
        print(f"{log}: {stale} records do not fit {template}'s current space; counted as "
              "failed trials", file=sys.stderr)
    return curve, task


def tune_autotvm(template: str, args: tuple, budget: int, n_parallel: int,
                 log: str) -> tuple[_Curve, float, Any]:
    from templtune import autotvm
    from templtune.autotvm.tuner import XGBTuner

    task = _autotvm_task(template, args)
    curve = _Curve(float(task.flop))

    def track(tuner: Any, inputs: list, results: list) -> None:
        curve.add([r.mean_cost if r.ok else None for r in results], [i.config for i in inputs])

    mo = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=n_parallel),
                                runner=autotvm.LocalRunner(timeout=15, cooldown_interval=0.0,
                                                           **RUNNER))
    t0 = time.perf_counter()
    tuner = XGBTuner(task, seed=0)
    tuner.tune(n_trial=min(budget, len(task.config_space)), measure_option=mo,
               callbacks=[track, autotvm.callback.log_to_file(log)])
    return curve, (time.perf_counter() - t0) / max(1, len(curve.best)), task


def contenders(kind: str, as_task: Any, as_curve: _Curve, at_task: Any, at_curve: Any,
               budgets: list[int]) -> dict:
    """name -> (run(), flop, set_threads(n)) for the best candidate of each tuner after each
    budget (``auto_scheduler@64``, ``template@64``, ...; a candidate that stayed the best is
    built once and shared) and the peers."""
    import templtune

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    seen: dict[int, Any] = {}

    def built(key: Any, make: Any, flop: float) -> Any:
        if id(key) not in seen:
            sch, args = make()
            mod = templtune.build(sch, args, target="llvm")
            arrs = [rng.random([int(x.value) for x in t.shape], dtype=np.float32) for t in args]
            ev = mod.time_evaluator(mod.entry_name, templtune.cpu(0), number=1,
                                    repeat=BURST)
            seen[id(key)] = ((lambda ev=ev, arrs=arrs: ev(*arrs).min), flop,
                             mod.set_num_threads)
        return seen[id(key)]

    dag = as_task.compute_dag
    for b in budgets:
        st = as_curve.best_at(b)
        if st is not None:
            out[f"auto_scheduler@{b}"] = built(st, lambda st=st: dag.apply_steps_from_state(
                dag.replay(st.transform_steps), layout_rewrite=as_task.layout_rewrite_option),
                dag.flop_ct)
        cfg = at_curve.best_at(b) if at_curve is not None else None
        if cfg is not None:
            out[f"template@{b}"] = built(cfg, lambda cfg=cfg: at_task.instantiate(cfg),
                                         float(at_task.flop))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        threadpool_limits = None
    lim: dict[str, Any] = {}

    def np_threads(n: int) -> None:
        if threadpool_limits is not None:
            lim["ctl"] = threadpool_limits(n)

    if kind == "dense":
        m, n, k = DENSE
        a = rng.random((m, k), dtype=np.float32)
        w = rng.random((n, k), dtype=np.float32)
        out["numpy"] = (_seconds(lambda: a @ w.T), 2.0 * m * n * k, np_threads)
    try:
        import torch
    except ImportError:  # pragma: no cover - optional
        return out
    if kind == "dense":
        ta, tw = torch.from_numpy(a), torch.from_numpy(w)
        out["pytorch"] = (_seconds(lambda: ta @ tw.T), 2.0 * m * n * k, torch.set_num_threads)
    else:
        n_, h, w_, co, ci, kh, kw, _, _ = CONV
        x = torch.rand(n_, ci, h, w_)
        wt = torch.rand(co, ci, kh, kw)
        b = torch.rand(1, co, 1, 1)
        f = torch.nn.functional
        flop = 2.0 * n_ * co * h * w_ * ci * kh * kw + 2 * n_ * co * h * w_
        out["pytorch"] = (_seconds(lambda: torch.relu(f.conv2d(x, wt, padding=1) + b)), flop,
                          torch.set_num_threads)
    return out


def _seconds(fn: Any) -> Any:
    def run() -> float:
        best = float("inf")
        for _ in range(BURST):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    return run


def interleaved(cands: dict, threads: int, rounds: int) -> dict[str, float]:
    """GFLOPS per contender: median of ``rounds`` interleaved rounds. Each round times every
    distinct kernel once (the fastest of ``BURST`` back-to-back calls), in a freshly shuffled
    order: a kernel that stayed the best over several budgets is one kernel with one figure,
    and no contender always runs right after the same neighbour (whose cache footprint, e.g. a
    9 MB weight transform, it would inherit)."""
    kernels: dict[int, Any] = {}
    for run, _flop, set_threads in cands.values():
        kernels[id(run)] = run
        set_threads(threads)
    for run in kernels.values():
        run()
    times: dict[int, list[float]] = {k: [] for k in kernels}
    order = list(kernels)
    rng = np.random.default_rng(threads)
    for _ in range(rounds):
        rng.shuffle(order)
        for k in order:
            times[k].append(kernels[k]())
    return {name: flop / float(np.median(times[id(run)])) / 1e9
            for name, (run, flop, _) in cands.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=["conv", "dense", "all"], default="all")
    p.add_argument("--trials", default="64,200,500", help="comma-separated budgets")
    p.add_argument("--per-round", type=int, default=16)
    p.add_argument("--n-parallel", type=int, default=os.cpu_count() or 2)
    p.add_argument("--tune-threads", type=int, default=1,
                   help="threads of the measured kernels while tuning (TEMPLTUNE_NUM_THREADS)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds of the final timing")
    p.add_argument("--no-autotvm", action="store_true")
    p.add_argument("--warmup", type=int, default=100,
                   help="XGBModel num_warmup_sample: measured samples before the model guides "
                        "the search (TVM's default, 100)")
    p.add_argument("--seed", type=int, default=0, help="SketchPolicy seed")
    p.add_argument("--conv-layout", choices=["nchw", "nhwc"], default="nhwc",
                   help="the auto-scheduler's conv2d workload layout (the template stays "
                        "conv2d_nchw, the fastest x86 template); nhwc is what TVM, and the "
                        "seed's x86 network tutorial, tune CPU networks in")
    p.add_argument("--conv-template", choices=["conv2d_nchw", "conv2d_nhwc"],
                   default="conv2d_nchw", help="the AutoTVM x86 conv2d template compared")
    p.add_argument("--json", action="store_true")
    p.add_argument("--from-logs", metavar="DIR",
                   help="skip tuning: rebuild both tuners' curves from the logs an earlier run "
                        "left in DIR (<kind>.json, <kind>_autotvm.json) and re-time them")
    args = p.parse_args(argv)
    # NOTE: set before any worker process starts (they inherit it). On a shared, oversubscribed
    # 2-core machine 2-thread kernels measure their barrier waits, not their code; tuning at 1
    # thread ranks candidates by their code. The final tables re-time the best kernels.
    os.environ["TEMPLTUNE_NUM_THREADS"] = str(args.tune_threads)
    budgets = sorted(int(x) for x in args.trials.split(","))
    work = ["conv", "dense"] if args.workload == "all" else [args.workload]
    tmp = args.from_logs or tempfile.mkdtemp(prefix="templtune_as_bench_")
    print(f"logs in {tmp}", flush=True)
    report: dict[str, Any] = {}
    conv_name = CONV_WORKLOADS[args.conv_layout]
    for kind in work:
        name, wargs = ((conv_name, CONV) if kind == "conv" else ("bench_dense", DENSE))
        tmpl, targs = ((args.conv_template, CONV) if kind == "conv"
                       else ("dense", DENSE))
        log = os.path.join(tmp, f"{kind}.json")
        at_log = os.path.join(tmp, f"{kind}_autotvm.json")
        at_task = at_curve = None
        if args.from_logs:
            as_curve, as_task = curve_from_log(name, wargs, log)
            row: dict[str, Any] = {"auto_scheduler": {b: as_curve.at(b) for b in budgets}}
            if os.path.exists(at_log):
                at_curve, at_task = autotvm_curve_from_log(tmpl, targs, at_log)
                row["autotvm"] = {b: at_curve.at(b) for b in budgets}
        else:
            print(f"== {kind}: auto_scheduler, {budgets[-1]} trials", flush=True)
            as_curve, as_tpt, as_task = tune_auto_scheduler(name, wargs, budgets[-1],
                                                            args.per_round, args.n_parallel, log,
                                                            args.warmup, args.seed)
            row = {"auto_scheduler": {b: as_curve.at(b) for b in budgets},
                   "auto_scheduler_s_per_trial": as_tpt}
            if not args.no_autotvm:
                print(f"== {kind}: AutoTVM template {tmpl}, {budgets[-1]} trials", flush=True)
                at_curve, at_tpt, at_task = tune_autotvm(tmpl, targs, budgets[-1],
                                                         args.n_parallel, at_log)
                row["autotvm"] = {b: at_curve.at(b) for b in budgets}
                row["autotvm_s_per_trial"] = at_tpt
        print(f"tuning measurements at {args.tune_threads} thread(s)")
        print(f"{'trials':>8} {'auto_sched GF':>14} {'template GF':>12} {'ratio':>7}")
        for b in budgets:
            a = row["auto_scheduler"][b]
            t = row.get("autotvm", {}).get(b)
            ratio = f"{a / t:7.2f}" if a and t else "      -"
            print(f"{b:>8} {a or 0:14.2f} {t or 0:12.2f} {ratio}")
        if "auto_scheduler_s_per_trial" in row:
            print(f"s/trial: auto_scheduler {row['auto_scheduler_s_per_trial']:.2f}"
                  + (f", template {row['autotvm_s_per_trial']:.2f}"
                     if "autotvm_s_per_trial" in row else ""))
        cands = contenders(kind, as_task, as_curve, at_task, at_curve, budgets)
        row["final"] = {}
        # NOTE: the tuning curves are single measurements taken minutes apart; the verdict per
        # budget comes from re-timing each tuner's best-so-far kernel in one process, in
        # interleaved rounds (1 thread: all budgets; 2 threads: the largest budget).
        last = budgets[-1]
        for nt in (1, 2):
            sel = {k: v for k, v in cands.items() if nt == 1 or "@" not in k
                   or k.endswith(f"@{last}")}
            g = interleaved(sel, nt, args.rounds)
            row["final"][nt] = g
            print(f"re-timed, {nt} thread(s), median of {args.rounds} interleaved rounds "
                  "(GFLOPS): " + ", ".join(f"{k} {v:.1f}" for k, v in g.items()), flush=True)
            for b in (budgets if nt == 1 else [last]):
                a, t = g.get(f"auto_scheduler@{b}"), g.get(f"template@{b}")
                if a and t:
                    print(f"  {nt} thread(s), {b} trials: auto_scheduler/template {a / t:.2f}")
        report[kind] = row
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
