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
from sample_efficiency_stats import (  # noqa: E402
    censored_summary,
    expected_random_trials,
    prob_random_within,
    q_upper_bound,
    trials_to_reach,
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


def summarize(name: str, runs: dict[str, dict[int, dict[str, Any]]],
              checkpoints: list[int], table: dict[int, float] | None = None,
              measure_s_per_config: float | None = None, n_space: int | None = None
              ) -> dict[str, Any]:
    """Print and return the per-tuner summary of one workload.

    ``table`` (config index -> GFLOPS of every valid config, from ``--measure-all``) makes the
    target "90% of the true optimum" and adds Random's exact expected trials to reach it;
    without it the target is 90% of the best any run found. ``measure_s_per_config`` (wall
    seconds to build and time one config) estimates the measurement time of a replayed
    round (``plan_size`` configs) for the per-round split."""
    best_run = max((max(r["curve"], default=0.0) for per in runs.values() for r in per.values()),
                   default=0.0)
    n_trial = checkpoints[-1]
    summary: dict[str, Any] = {
        "workload": name, "best_any_gflops": best_run / 1e9, "checkpoints": checkpoints,
        "tuners": {},
        # per tuner, per seed: the GFLOPS of every trial in order (0 for failures)
        "curves": {t: {str(sd): [f / 1e9 for f in r["curve"]] for sd, r in per.items()}
                   for t, per in runs.items()},
        # per tuner, per seed: config index of every trial, and how many first trials were
        # uniform draws (used by uniform_estimate, also when summaries are merged)
        "indices": {t: {str(sd): list(r.get("indices", [])) for sd, r in per.items()}
                    for t, per in runs.items()},
        "n_uniform": {t: {str(sd): int(r.get("n_uniform", 0)) for sd, r in per.items()}
                      for t, per in runs.items()}}
    best_any = best_run
    print(f"\n== {name}: best found by any run {best_run / 1e9:.2f} GFLOPS")
    if table:
        best_any = max(table.values()) * 1e9
        n, k = len(table), sum(1 for v in table.values() if v * 1e9 >= 0.9 * best_any)
        exp = expected_random_trials(n, k)
        summary["exhaustive"] = {
            "n": n, "true_best_gflops": best_any / 1e9, "n_within_90pct": k,
            "q": k / n, "random_expected_trials": exp,
            "random_p_within": {str(c): prob_random_within(n, k, c) for c in checkpoints}}
        print(f"   exhaustive table: true optimum {best_any / 1e9:.2f} GFLOPS; {k} of {n} configs "
              f"(q = {k / n:.2%}) within 90%; Random's expected trials to 90% (N+1)/(K+1) = "
              f"{exp:.1f}; P(Random within " + ", ".join(
                  f"{c}: {prob_random_within(n, k, c):.2f}" for c in checkpoints) + ")")
    elif n_space:
        summary["uniform_estimate"] = uniform_estimate(runs, 0.9 * best_any, n_space)
    header = "tuner   " + "".join(f"{c:>10d}" for c in checkpoints) + "   trials to 90% (per seed)"
    print(header)
    for tname, per in runs.items():
        rows = []
        to90 = []
        for r in per.values():
            mx = np.maximum.accumulate(np.asarray(r["curve"] or [0.0]))
            rows.append([mx[min(c, len(mx)) - 1] / 1e9 for c in checkpoints])
            to90.append(trials_to_reach(mx, 0.9 * best_any))
        mean = np.mean(np.asarray(rows), axis=0)
        stats = censored_summary(to90, n_trial)
        print(f"{tname:8s}" + "".join(f"{v:10.2f}" for v in mean) + f"   {to90}")
        if len(to90) > 3:
            print(f"         reached 90% in {stats['reached']:.0f}/{stats['seeds']:.0f} seeds, "
                  f"median {stats['median']:.0f}, mean >= {stats['mean_lower']:.1f} "
                  f"(never counted as {n_trial + 1})")
        entry: dict[str, Any] = {"best_gflops_mean": mean.tolist(), "best_gflops_per_seed": rows,
                                 "trials_to_90pct": to90, "trials_to_90pct_stats": stats}
        rounds = [x for r in per.values() for x in r.get("rounds", [])]
        if rounds:
            split = {k: float(np.mean([x[k] for x in rounds])) for k in ("extract", "fit",
                                                                          "optimize")}
            # NOTE: a "round" is the wall time of a run divided by its re-planning rounds
            # (measuring plan_size configs plus the model work); measurements served from the
            # shared cache make rounds shorter than in a real tuning session, so replayed runs
            # add the sweep's measured time per config times the plan size instead.
            per_round = float(np.mean([r["seconds"] / max(1, len(r.get("rounds", [])))
                                       for r in per.values()]))
            if measure_s_per_config is not None:
                plan = int(next(iter(per.values())).get("plan_size", 64))
                round_measure_s = plan * measure_s_per_config
                per_round += round_measure_s
                split["measure_estimate"] = round_measure_s
            split["round"] = per_round
            entry["round_seconds"] = split
            print(f"         per round ({len(rounds)} rounds, {per_round:.1f} s each): features "
                  f"{split['extract']:.2f} s ({split['extract'] / per_round:.0%}), fit "
                  f"{split['fit']:.2f} s ({split['fit'] / per_round:.0%}), SA "
                  f"{split['optimize']:.2f} s ({split['optimize'] / per_round:.0%})")
        summary["tuners"][tname] = entry
    return summary


def uniform_estimate(runs: dict[str, dict[int, dict[str, Any]]], threshold: float,
                     n_space: int) -> dict[str, Any]:
    """Share ``q`` of configs reaching ``threshold`` (FLOP/s) among all uniformly drawn ones
    (each run's first ``n_uniform`` trials, distinct configs), its 95% upper bound, and the
    implied expected Random trials ``(N+1)/(qN+1)`` (the bound gives a lower bound on it)."""
    seen: dict[int, float] = {}
    for per in runs.values():
        for r in per.values():
            m = int(r.get("n_uniform", 0))
            seen.update(zip(r.get("indices", [])[:m], r["curve"][:m]))
    m = len(seen)
    if m == 0:
        return {"samples": 0}
    hits = sum(1 for v in seen.values() if v >= threshold)
    q, q_up = hits / m, q_upper_bound(hits, m)
    out = {"samples": m, "hits": hits, "q": q, "q_upper95": q_up,
           "random_expected_trials": (n_space + 1) / (q * n_space + 1),
           "random_expected_trials_lower95": (n_space + 1) / (q_up * n_space + 1)}
    print(f"   uniform samples: {hits} of {m} distinct uniformly drawn configs within 90% "
          f"(q = {q:.2%}, 95% upper bound {q_up:.2%}); Random's expected trials to 90% "
          f"~{out['random_expected_trials']:.0f}, >= {out['random_expected_trials_lower95']:.0f} "
          f"at 95%")
    return out


WORKLOADS = {"conv2d": ("conv2d", "sample_efficiency/conv2d_wide", CONV_ARGS),
             "dense": ("dense", "sample_efficiency/dense_wide", DENSE_ARGS)}


def merge_summaries(paths: Sequence[str], n_space: int) -> dict[str, Any]:
    """Joint summary of several runs' summaries of one workload (tuners/seeds are merged; a
    later file's tuner+seed replaces an earlier one). Trial indices missing from older files
    are recovered from the GFLOPS values (each value is one cached config's)."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    measured: dict[str, float] = {}
    first: dict[str, Any] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        s = next(x for x in data if "curves" in x)
        first = first or s
        measured.update(s.get("measured_gflops", {}))
        by_value = {v: int(i) for i, v in s.get("measured_gflops", {}).items()}
        for t, per in s["curves"].items():
            for sd, curve in per.items():
                idx = s.get("indices", {}).get(t, {}).get(sd) or [by_value.get(g, -1)
                                                                 for g in curve]
                n_uni = s.get("n_uniform", {}).get(t, {}).get(sd)
                if -1 in idx:  # no stored indices and no measured_gflops to recover them
                    print(f"  {path}: {t} seed {sd}: trial configs unknown, left out of the "
                          f"uniform-sample estimate")
                    n_uni = 0
                elif n_uni is None:
                    n_uni = (len(curve) if t == "random" else 100 if t == "ga" else
                             int(s.get("plan_sizes", {}).get(t, 32 if t == "xgb" else 64)))
                runs.setdefault(t, {})[int(sd)] = {"curve": [g * 1e9 for g in curve],
                                                   "indices": idx, "n_uniform": n_uni,
                                                   "seconds": 0.0}
    summary = summarize(first["workload"].replace(" (seeds so far)", "") + " (merged)", runs,
                        first["checkpoints"], n_space=n_space)
    for t in runs:  # per-round times are per run: keep each file's
        for path in paths:
            for s in json.loads(Path(path).read_text()):
                rs = s.get("tuners", {}).get(t, {}).get("round_seconds")
                if rs and "curves" in s:
                    summary["tuners"][t]["round_seconds"] = rs
    summary.update(template=first.get("template"), measured_gflops=measured, merged=list(paths))
    return summary


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
