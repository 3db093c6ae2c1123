"""Sample efficiency of the AutoTVM tuners: XGB vs GA vs Random.

For each workload (the seed's conv2d layer 1x512x7x7 with 512 3x3 filters, pad 1; and a 1024^3
dense) and each seed, every tuner runs ``max(checkpoints)`` trials. Printed per workload:

* best GFLOPS after each checkpoint (50/100/200/400 by default), per tuner (mean over seeds and
  per seed);
* trials needed to reach 90% of the best GFLOPS any run found;
* for XGB, the per-round time split: feature extraction, model fit, simulated annealing.

Measurements of a workload are cached by config index and shared by every tuner and seed, so
runs are compared on the same numbers and each config is compiled and timed once (``--cache``
keeps them in a JSON file across runs). Kernels run on one thread (``--threads``) and one
measurement at a time: on a shared 2-core machine this is far less noisy than two threads.

Spaces (``--space``): ``wide`` (default, primary) uses the TVM-scale spaces of
``benchmarks/wide_templates.py`` (the library kernels over thousands of mostly unfiltered
points); ``library`` uses the library templates as they are (small filtered spaces); ``both``
runs both. The XGB runs of one workload share one feature cache (features depend only on the
config, like the measurements); ``--prefetch`` extracts the features of the whole space once,
in the process pool, before tuning (reported separately).

Usage::

    python benchmarks/sample_efficiency.py                      # real builder/runner, llvm
    python benchmarks/sample_efficiency.py --fake               # synthetic costs (smoke test)
    python benchmarks/sample_efficiency.py --space library --checkpoints 50,100 --seeds 0

Library templates default to the project's x86 templates (``conv2d_nchw.x86`` /
``dense.x86``), else to the first registered template whose name contains "conv2d" / "dense".
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_efficiency_cache import Cache, make_option, measure_all  # noqa: E402
from sample_efficiency_report import (  # noqa: E402
    merge_summaries,
    summarize,
    uniform_estimate,  # noqa: F401 - re-exported: tests call se.uniform_estimate
)

from templtune import autotvm  # noqa: E402
from templtune.autotvm.feature.extract import FeatureExtractor  # noqa: E402
from templtune.autotvm.task.task import TASK_TABLE  # noqa: E402
from templtune.autotvm.tuner.registry import get_tuner, load_tuners  # noqa: E402

CONV_ARGS = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
DENSE_ARGS = (1024, 1024, 1024)


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
    if not (x86 or names):
        raise SystemExit(f"no registered {kind} template")
    return (x86 or names)[0]


# ------------------------------------------------------------------------- experiment
def parse_xgb_opts(specs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["name:key=value;key=value", ...]`` -> ``{name: {key: value}}`` (values as Python
    literals when they parse, else strings), e.g. ``xgb_log:log_target=True;plan_size=32``."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name, _, body = spec.partition(":")
        if not name.startswith("xgb"):
            raise ValueError(f"XGB variant names must start with 'xgb', got {name!r}")
        kw: dict[str, Any] = {}
        for item in filter(None, body.split(";")):
            key, eq, val = item.partition("=")
            if not eq:
                raise ValueError(f"expected key=value in {spec!r}, got {item!r}")
            try:
                kw[key.strip()] = ast.literal_eval(val.strip())
            except (ValueError, SyntaxError):
                kw[key.strip()] = val.strip()
        out[name] = kw
    return out


def make_tuner(name: str, task: Any, seed: int, feature_type: str,
               extractor: FeatureExtractor | None,
               xgb_opts: dict[str, dict[str, Any]] | None = None) -> Any:
    # NOTE: each tuner gets its own seed stream: with one shared integer seed, GATuner's
    # initial population and RandomTuner's first picks are the very same configs. XGB
    # variants (names starting "xgb") share xgb's stream, so they differ only by options.
    base = "xgb" if name.startswith("xgb") else name
    seed = int(np.random.SeedSequence([seed, sum(map(ord, base))]).generate_state(1)[0])
    try:
        info = get_tuner(base)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    kw = dict((xgb_opts or {}).get(name, {}))
    if info.needs_features:
        kw.setdefault("feature_type", feature_type)
        kw.update(num_threads=1, extractor=extractor)
    return info.create(task, seed=seed, **kw)


def run_one(task: Any, tuner_name: str, seed: int, n_trial: int, option: dict,
            feature_type: str, extractor: FeatureExtractor | None,
            xgb_opts: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    tuner = make_tuner(tuner_name, task, seed, feature_type, extractor, xgb_opts)
    curve: list[float] = []
    indices: list[int] = []
    tic = time.perf_counter()

    def record(t: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        before = len(curve)
        indices.extend(int(m.config.index) for m in inputs)
        for r in results:
            curve.append(t._flops(r) if r.ok else 0.0)
        if len(curve) // 50 > before // 50:
            print(f"    {tuner_name} seed {seed}: {len(curve)} trials, best "
                  f"{max(curve) / 1e9:.2f} GFLOPS, {time.perf_counter() - tic:.0f} s", flush=True)

    tuner.tune(n_trial=n_trial, measure_option=option, callbacks=[record])
    # NOTE: how many first trials are uniform random draws: all of Random's, XGB's first plan
    # (no model yet), GA's first population (used to estimate the share of good configs).
    n_uniform = (len(curve) if tuner_name == "random" else
                 getattr(tuner, "plan_size", None) or getattr(tuner, "pop_size", 0))
    out: dict[str, Any] = {"curve": curve, "indices": indices, "n_uniform": int(n_uniform),
                           "seconds": time.perf_counter() - tic,
                           "plan_size": int(getattr(tuner, "plan_size", 0))}
    if hasattr(tuner, "round_stats"):
        out["rounds"] = tuner.round_stats
    return out


WORKLOADS = {"conv2d": ("conv2d", "sample_efficiency/conv2d_wide", CONV_ARGS),
             "dense": ("dense", "sample_efficiency/dense_wide", DENSE_ARGS)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="conv2d,dense")
    p.add_argument("--merge", help="comma-separated summary JSONs of one workload (other runs' "
                   "tuners/seeds, same cache): print and write (--json) their joint summary")
    p.add_argument("--space", default="wide", choices=("wide", "library", "both"))
    p.add_argument("--tuners", default="xgb,ga,random",
                   help="comma-separated registered tuners ("
                        + ", ".join(sorted(load_tuners())) + "; xgb* names are xgb variants)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--checkpoints", default="50,100,200,400")
    p.add_argument("--conv-template", help="library conv2d template (default conv2d_nchw.x86)")
    p.add_argument("--dense-template", help="library dense template (default dense.x86)")
    p.add_argument("--target", default="llvm")
    p.add_argument("--feature-type", default="itervar", choices=("itervar", "knob", "curve"))
    p.add_argument("--n-parallel", type=int, default=2, help="builds per batch")
    p.add_argument("--n-workers", type=int, default=None, help="feature-extraction processes")
    p.add_argument("--prefetch", action="store_true",
                   help="extract the features of the whole space before tuning")
    p.add_argument("--threads", type=int, default=1, help="threads of the measured kernels")
    p.add_argument("--timeout", type=float, default=3.0, help="run timeout (s) per config")
    p.add_argument("--cache", help="JSON file of measurements shared across runs")
    p.add_argument("--fake", action="store_true", help="synthetic costs instead of measuring")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--measure-all", action="store_true",
                   help="measure every valid config of each workload's space into --cache "
                        "(resumable: cached configs are skipped, the cache is saved as it goes); "
                        "no tuning")
    p.add_argument("--replay", action="store_true",
                   help="serve every measurement from --cache (built and timed before, e.g. by "
                        "--measure-all); a config missing from it is an error")
    p.add_argument("--xgb-opts", action="append", default=[],
                   help="XGB variant 'name:key=value;...' (name starts with xgb, listed in "
                        "--tuners), e.g. 'xgb_log:log_target=True'; repeatable")
    p.add_argument("--measure-seconds-per-config", type=float,
                   help="with --replay: measured wall seconds per config (the --measure-all "
                        "sweep's), to estimate the measurement share of an XGB round")
    a = p.parse_args(argv)
    # NOTE: set before the runner's measurement process starts (it inherits the environment).
    os.environ["TEMPLTUNE_NUM_THREADS"] = str(a.threads)
    import wide_templates  # noqa: F401 - registers the wide templates

    if a.merge:
        wl = a.workloads.split(",")[0]
        task = autotvm.task.create(WORKLOADS[wl][1], args=WORKLOADS[wl][2], target=a.target)
        merged = merge_summaries(a.merge.split(","), len(task.config_space))
        if a.json:
            Path(a.json).write_text(json.dumps([merged], indent=1))
        return 0

    checkpoints = sorted(int(c) for c in a.checkpoints.split(","))
    seeds = [int(s) for s in a.seeds.split(",")]
    n_trial = checkpoints[-1]
    summaries = []
    spaces = ["wide", "library"] if a.space == "both" else [a.space]
    for wl in a.workloads.split(","):
        if wl not in WORKLOADS:
            raise SystemExit(f"unknown workload {wl!r}")
        kind, wide_name, args = WORKLOADS[wl]
        for space in spaces:
            explicit = a.conv_template if wl == "conv2d" else a.dense_template
            tname = wide_name if space == "wide" else pick_template(kind, explicit)
            def save(partial: dict[str, Any], done: list[dict[str, Any]] = summaries) -> None:
                if a.json:
                    Path(a.json).write_text(json.dumps([*done, partial], indent=1))

            summaries.append(run_workload(a, f"{wl}/{space}", tname, args, seeds, n_trial,
                                          checkpoints, save))
            if a.json:
                Path(a.json).write_text(json.dumps(summaries, indent=1))
    return 0


def run_workload(a: argparse.Namespace, label: str, tname: str, args: tuple, seeds: list[int],
                 n_trial: int, checkpoints: list[int],
                 save_partial: Any = None) -> dict[str, Any]:
    """Tune one workload with every tuner and seed; print and return its summary.

    After each seed (all tuners), the summary of the seeds done so far is printed and passed
    to ``save_partial`` (a run cut short still leaves complete seeds)."""
    task = autotvm.task.create(tname, args=args, target=a.target)
    print(f"{label}: template {tname}, {len(task.config_space)} configs, "
          f"{(task.flop or 0) / 1e9:.3f} GFLOP", flush=True)
    # NOTE: synthetic (--fake) costs get their own cache key, never mixed with measurements.
    cache = Cache(Path(a.cache) if a.cache else None,
                   f"{tname}{args}/{a.threads}t" + ("/fake" if a.fake else ""))
    if getattr(a, "measure_all", False):
        return measure_all(a, label, task, cache)
    option, builder, runner = make_option(a, cache)
    n_space = len(task.config_space)
    # NOTE: a cache holding every valid config is the exhaustive table (true optimum known).
    table = ({i: (task.flop / r.mean_cost / 1e9 if r.ok else 0.0)
              for i, r in cache.results.items()} if len(cache.results) >= n_space else None)
    measure_s = a.measure_seconds_per_config if a.replay else None
    xgb_opts = parse_xgb_opts(a.xgb_opts)
    extractor = None
    summary_extra: dict[str, Any] = {"template": tname, "n_configs": len(task.config_space)}
    if any(t.startswith("xgb") for t in a.tuners.split(",")):
        extractor = FeatureExtractor(task, a.feature_type, a.n_workers)
        if a.prefetch:
            from templtune.autotvm.tuner.index_based import space_is_valid

            tic = time.perf_counter()
            valid = [i for i in range(int(task.config_space.range_length))
                     if space_is_valid(task.config_space, i)]
            extractor.get(valid)
            summary_extra["prefetch_seconds"] = time.perf_counter() - tic
            print(f"  prefetched {a.feature_type} features of {len(valid)} configs in "
                  f"{summary_extra['prefetch_seconds']:.1f} s", flush=True)
    runs: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in a.tuners.split(",")}
    # NOTE: seeds outside, tuners inside: load from other processes on this machine drifts
    # over time, and interleaving keeps it from favouring one tuner.
    for seed in seeds:
        for tuner_name in runs:
            runs[tuner_name][seed] = run_one(task, tuner_name, seed, n_trial, option,
                                             a.feature_type, extractor, xgb_opts)
            print(f"  {tuner_name} seed {seed}: {runs[tuner_name][seed]['seconds']:.1f} s, "
                  f"{runner.n_measured} distinct configs measured so far", flush=True)
            cache.save()
        if save_partial is not None and seed != seeds[-1]:
            partial = summarize(f"{label} (seeds so far)", runs, checkpoints, table,
                                n_space=n_space)
            partial.update(summary_extra, partial_seeds=seeds[:seeds.index(seed) + 1])
            save_partial(partial)
    if extractor is not None:
        extractor.close()
        summary_extra["feature_seconds_total"] = extractor.seconds
        summary_extra["features_computed"] = extractor.n_computed
    builder.close()
    runner.close()
    summary = summarize(label, runs, checkpoints, table, measure_s, n_space)
    summary.update(summary_extra)
    summary["measured_gflops"] = {str(i): (task.flop / r.mean_cost / 1e9 if r.ok else 0.0)
                                  for i, r in sorted(cache.results.items())}
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
