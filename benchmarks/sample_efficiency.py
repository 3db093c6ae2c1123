"""Sample efficiency of the AutoTVM tuners: XGB vs GA vs Random.

For each workload (the seed's conv2d layer 1x512x7x7 with 512 3x3 filters, pad 1; and a 1024^3
dense) and each seed, every tuner runs ``max(checkpoints)`` trials. Printed per workload:

* best GFLOPS after each checkpoint (50/100/200/400 by default), per tuner (mean over seeds and
  per seed);
* trials needed to reach 90% of the best GFLOPS any run found;
* for XGB, the per-round time split: feature extraction, model fit, simulated annealing.

Measurements of a workload are cached by config index and shared by every tuner and seed, so
runs are compared on the same numbers and each config is compiled and timed once.

Usage::

    python benchmarks/sample_efficiency.py                      # real builder/runner, llvm
    python benchmarks/sample_efficiency.py --fake               # synthetic costs (smoke test)
    python benchmarks/sample_efficiency.py --conv-template conv2d_nchw.x86 \\
        --dense-template dense_nopack.x86 --checkpoints 50,100 --seeds 0

Templates default to the project's x86 templates (``conv2d_nchw.x86`` / ``dense.x86``, imported
from ``templtune.templates.x86``), else to the first registered template whose name contains
"conv2d" / "dense"; if none is registered, the small templates defined in this file are used.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from templates.tiled_dense import tiled_dense  # noqa: E402
from templtune import autotvm, te  # noqa: E402
from templtune.autotvm.measure.fake import FakeBuilder, FakeRunner  # noqa: E402
from templtune.autotvm.measure.measure import (  # noqa: E402
    Builder,
    BuildResult,
    MeasureErrorNo,
    MeasureResult,
    Runner,
    measure_option,
)
from templtune.autotvm.task.task import TASK_TABLE  # noqa: E402
from templtune.autotvm.tuner.ga_tuner import GATuner  # noqa: E402
from templtune.autotvm.tuner.index_based import RandomTuner  # noqa: E402
from templtune.autotvm.tuner.xgboost_tuner import XGBTuner  # noqa: E402

CONV_ARGS = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
DENSE_ARGS = (1024, 1024, 1024)


# ------------------------------------------------------------------------- fallback templates
@autotvm.template("sample_efficiency/conv2d_nchw")
def bench_conv2d(N, H, W, CO, CI, KH, KW, stride, padding):  # noqa: N803 - tutorial names
    """Direct NCHW conv2d with tiled output channels / width and a split reduction."""
    sh, sw = stride
    ph, pw = padding
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    pad = te.compute((N, CI, H + 2 * ph, W + 2 * pw),
                     lambda n, c, y, x: te.if_then_else(
                         te.all(y >= ph, y < H + ph, x >= pw, x < W + pw),
                         data[n, c, y - ph, x - pw], 0.0), name="pad")
    OH, OW = (H + 2 * ph - KH) // sh + 1, (W + 2 * pw - KW) // sw + 1  # noqa: N806
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    conv = te.compute((N, CO, OH, OW), lambda n, f, y, x: te.sum(
        pad[n, rc, y * sh + ry, x * sw + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv")
    s = te.create_schedule(conv.op)
    s[pad].compute_inline()
    cfg = autotvm.get_config()
    n, f, y, x = s[conv].op.axis
    cfg.define_split("tile_f", f, num_outputs=3)
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg.define_split("tile_rc", rc, num_outputs=2)
    cfg.define_knob("vec", [0, 1])
    cfg.define_knob("unroll_rx", [0, 1])
    fo, fm, fi = cfg["tile_f"].apply(s, conv, f)
    xo, xi = cfg["tile_x"].apply(s, conv, x)
    rco, rci = cfg["tile_rc"].apply(s, conv, rc)
    s[conv].reorder(n, fo, y, xo, fm, rco, ry, rci, rx, fi, xi)
    s[conv].parallel(fo)
    if cfg["unroll_rx"].val:
        s[conv].unroll(rx)
    if cfg["vec"].val:
        s[conv].vectorize(xi)
    cfg.add_flop(2 * N * CO * OH * OW * CI * KH * KW)
    return s, [data, kernel, conv]


@autotvm.template("sample_efficiency/dense")
def bench_dense(M, N, K):  # noqa: N803
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` with 3-level tiling, vectorisation and parallelism."""
    return tiled_dense(M, N, K, parallel=True)


def register_x86_templates() -> None:
    """Import the project's x86 templates if available (they register on import)."""
    for mod in ("templtune.templates.x86", "templates.x86"):
        try:
            __import__(mod)
            return
        except Exception:  # noqa: BLE001, S112 - optional; fall back to this file's templates
            continue


def pick_template(kind: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    register_x86_templates()
    names = [n for n in TASK_TABLE if kind in n and not n.startswith("sample_efficiency/")]
    x86 = [n for n in names if "x86" in n or "cpu" in n]
    return (x86 or names or [f"sample_efficiency/{'conv2d_nchw' if kind == 'conv2d' else kind}"])[0]


# ------------------------------------------------------------------------- shared measurement cache
class _Cache:
    def __init__(self) -> None:
        self.results: dict[int, MeasureResult] = {}
        self.builds: dict[int, BuildResult] = {}


class CachingBuilder(Builder):
    """Builds only configs never measured before (results are shared across tuners)."""

    def __init__(self, inner: Builder, cache: _Cache) -> None:
        super().__init__(timeout=inner.timeout, n_parallel=inner.n_parallel)
        self.inner, self.cache = inner, cache

    def set_task(self, task: Any, build_kwargs: dict | None = None) -> None:
        self.inner.set_task(task, build_kwargs)

    def build(self, measure_inputs):
        todo = [m for m in measure_inputs if int(m.config.index) not in self.cache.results]
        built = self.inner.build(todo) if todo else []
        for m, b in zip(todo, built):
            self.cache.builds[int(m.config.index)] = b
        return [BuildResult(None, MeasureErrorNo.NO_ERROR, "", 0.0) for _ in measure_inputs]

    def close(self) -> None:
        self.inner.close()


class CachingRunner(Runner):
    def __init__(self, inner: Runner, cache: _Cache) -> None:
        super().__init__(timeout=inner.timeout, n_parallel=1)
        self.inner, self.cache = inner, cache
        self.n_measured = 0

    def set_task(self, task: Any) -> Any:
        return self.inner.set_task(task)

    def get_build_kwargs(self) -> dict:
        return self.inner.get_build_kwargs()

    def run(self, measure_inputs, build_results):
        todo = [m for m in measure_inputs if int(m.config.index) not in self.cache.results]
        if todo:
            res = self.inner.run(todo, [self.cache.builds.pop(int(m.config.index)) for m in todo])
            self.n_measured += len(todo)
            for m, r in zip(todo, res):
                self.cache.results[int(m.config.index)] = r
        return [self.cache.results[int(m.config.index)] for m in measure_inputs]

    def close(self) -> None:
        self.inner.close()


# ------------------------------------------------------------------------- experiment
def make_tuner(name: str, task: Any, seed: int, feature_type: str, n_workers: int | None) -> Any:
    # NOTE: each tuner gets its own seed stream: with one shared integer seed, GATuner's
    # initial population and RandomTuner's first picks are the very same configs.
    seed = int(np.random.SeedSequence([seed, sum(map(ord, name))]).generate_state(1)[0])
    if name == "xgb":
        return XGBTuner(task, feature_type=feature_type, seed=seed, n_workers=n_workers,
                        num_threads=1)
    if name == "ga":
        return GATuner(task, seed=seed)
    if name == "random":
        return RandomTuner(task, seed=seed)
    raise ValueError(f"unknown tuner {name!r}")


def run_one(task: Any, tuner_name: str, seed: int, n_trial: int, option: dict,
            feature_type: str, n_workers: int | None) -> dict[str, Any]:
    tuner = make_tuner(tuner_name, task, seed, feature_type, n_workers)
    curve: list[float] = []
    tic = time.perf_counter()

    def record(t: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        before = len(curve)
        for r in results:
            curve.append(t._flops(r) if r.ok else 0.0)
        if len(curve) // 25 > before // 25:
            print(f"    {tuner_name} seed {seed}: {len(curve)} trials, best "
                      f"{max(curve) / 1e9:.2f} GFLOPS, {time.perf_counter() - tic:.0f} s",
                      flush=True)

    tuner.tune(n_trial=n_trial, measure_option=option, callbacks=[record])
    out: dict[str, Any] = {"curve": curve, "seconds": time.perf_counter() - tic}
    if hasattr(tuner, "round_stats"):
        out["rounds"] = tuner.round_stats
    return out


def summarize(name: str, runs: dict[str, dict[int, dict[str, Any]]],
              checkpoints: list[int]) -> dict[str, Any]:
    best_any = max((max(r["curve"], default=0.0) for per in runs.values() for r in per.values()),
                   default=0.0)
    summary: dict[str, Any] = {"workload": name, "best_any_gflops": best_any / 1e9, "tuners": {}}
    print(f"\n== {name}: best found by any run {best_any / 1e9:.2f} GFLOPS")
    header = "tuner   " + "".join(f"{c:>10d}" for c in checkpoints) + "   trials to 90% (per seed)"
    print(header)
    for tname, per in runs.items():
        rows = []
        to90 = []
        for r in per.values():
            mx = np.maximum.accumulate(np.asarray(r["curve"] or [0.0]))
            rows.append([mx[min(c, len(mx)) - 1] / 1e9 for c in checkpoints])
            hit = np.flatnonzero(mx >= 0.9 * best_any)
            to90.append(int(hit[0]) + 1 if len(hit) else None)
        mean = np.mean(np.asarray(rows), axis=0)
        print(f"{tname:8s}" + "".join(f"{v:10.2f}" for v in mean) + f"   {to90}")
        entry: dict[str, Any] = {"best_gflops_mean": mean.tolist(), "best_gflops_per_seed": rows,
                                 "trials_to_90pct": to90}
        rounds = [x for r in per.values() for x in r.get("rounds", [])]
        if rounds:
            split = {k: float(np.mean([x[k] for x in rounds])) for k in ("extract", "fit",
                                                                          "optimize")}
            entry["round_seconds"] = split
            print(f"         per round: features {split['extract']:.2f} s, fit "
                  f"{split['fit']:.2f} s, SA {split['optimize']:.2f} s ({len(rounds)} rounds)")
        summary["tuners"][tname] = entry
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="conv2d,dense")
    p.add_argument("--tuners", default="xgb,ga,random")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--checkpoints", default="50,100,200,400")
    p.add_argument("--conv-template")
    p.add_argument("--dense-template")
    p.add_argument("--target", default="llvm")
    p.add_argument("--feature-type", default="itervar", choices=("itervar", "knob", "curve"))
    p.add_argument("--n-parallel", type=int, default=2, help="builds per batch")
    p.add_argument("--n-workers", type=int, default=None, help="feature-extraction processes")
    p.add_argument("--fake", action="store_true", help="synthetic costs instead of measuring")
    p.add_argument("--json", help="write the summary here")
    a = p.parse_args(argv)
    checkpoints = sorted(int(c) for c in a.checkpoints.split(","))
    seeds = [int(s) for s in a.seeds.split(",")]
    n_trial = checkpoints[-1]
    summaries = []
    for wl in a.workloads.split(","):
        if wl == "conv2d":
            tname, args = pick_template("conv2d", a.conv_template), CONV_ARGS
        elif wl == "dense":
            tname, args = pick_template("dense", a.dense_template), DENSE_ARGS
        else:
            raise SystemExit(f"unknown workload {wl!r}")
        task = autotvm.task.create(tname, args=args, target=a.target)
        explicit = a.conv_template if wl == "conv2d" else a.dense_template
        if not explicit and len(task.config_space) < 2 * n_trial:
            # NOTE: a space smaller than twice the budget cannot separate the tuners.
            fallback = f"sample_efficiency/{'conv2d_nchw' if wl == 'conv2d' else 'dense'}"
            print(f"{wl}: {tname} has only {len(task.config_space)} configs; using {fallback}")
            tname = fallback
            task = autotvm.task.create(tname, args=args, target=a.target)
        print(f"{wl}: template {tname}, {len(task.config_space)} configs, "
              f"{(task.flop or 0) / 1e9:.3f} GFLOP")
        cache = _Cache()
        if a.fake:
            inner_b: Builder = FakeBuilder(n_parallel=a.n_parallel)
            inner_r: Runner = FakeRunner(seed=0)
        else:
            from templtune.autotvm.measure.local_builder import LocalBuilder
            from templtune.autotvm.measure.local_runner import LocalRunner

            inner_b = LocalBuilder(n_parallel=a.n_parallel)
            inner_r = LocalRunner(number=3, repeat=1, min_repeat_ms=20)
        builder, runner = CachingBuilder(inner_b, cache), CachingRunner(inner_r, cache)
        option = measure_option(builder, runner)
        runs: dict[str, dict[int, dict[str, Any]]] = {}
        for tuner_name in a.tuners.split(","):
            runs[tuner_name] = {}
            for seed in seeds:
                runs[tuner_name][seed] = run_one(task, tuner_name, seed, n_trial, option,
                                                 a.feature_type, a.n_workers)
                print(f"  {tuner_name} seed {seed}: {runs[tuner_name][seed]['seconds']:.1f} s, "
                      f"{runner.n_measured} distinct configs measured so far", flush=True)
        summaries.append(summarize(wl, runs, checkpoints))
    if a.json:
        Path(a.json).write_text(json.dumps(summaries, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
