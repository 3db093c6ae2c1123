"""How well does the XGB cost model rank configs of a wide space? (offline, from measurements)

Reads the measurement cache written by ``sample_efficiency.py --cache`` (config index -> costs),
and for each feature type and loss trains ``XGBoostCostModel`` on ``n`` measured configs drawn
at random, then scores the other measured configs. Printed per (feature type, loss, n), as the
median over ``--repeats`` draws, with plain (``raw``) or log-scaled (``log``, the
``log_target`` option) labels: Spearman's rho on the held-out configs, the mean true
throughput (as a fraction of the best) of the model's top 64 held-out picks, how many of
the held-out top-5% configs are among those 64, and (``hit90``, the mean over draws) whether
one of those 64 is within 90% of the best measured config, i.e. whether a tuner's next plan
would reach the benchmark's target. ``--params`` adds xgboost parameter variants.

NOTE: the held-out configs are those the benchmark's tuners measured, which over-represents
good configs (XGB and GA pick them); the random tuner's picks alone would be unbiased but few.

Usage::

    python benchmarks/model_ranking.py --cache /tmp/se/cache_dense.json --workload dense
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import wide_templates  # noqa: E402, F401 - registers the wide templates
from sample_efficiency import WORKLOADS  # noqa: E402

from templtune import autotvm  # noqa: E402
from templtune.autotvm.feature.extract import FeatureExtractor  # noqa: E402
from templtune.autotvm.tuner.metric import spearman  # noqa: E402
from templtune.autotvm.tuner.xgboost_cost_model import XGBoostCostModel  # noqa: E402


def load_measurements(path: Path, key_prefix: str) -> dict[int, float]:
    """Config index -> seconds (inf for failures) of the cache entry starting with the key."""
    data = json.loads(path.read_text())
    keys = [k for k in data if k.startswith(key_prefix)]
    if not keys:
        raise SystemExit(f"no cache entry for {key_prefix!r} in {path} (has {list(data)})")
    out = {}
    for i, (costs, err) in data[keys[0]].items():
        out[int(i)] = float(np.mean(costs)) if err == 0 else float("inf")
    return out


def evaluate(task, extractor: FeatureExtractor, idx: np.ndarray, gflops: np.ndarray, n: int,
             loss: str, seed: int, top: int = 64, log_target: bool = False,
             params: dict[str, Any] | None = None) -> tuple[float, float, float, float]:
    """(Spearman, mean normalised GFLOPS of the top picks, recall of the top 5%, whether a top
    pick is within 90% of the best of ALL configs) of one draw."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(idx))
    tr, te = perm[:n], perm[n:]
    model = XGBoostCostModel(task, extractor.feature_type, loss_type=loss, num_threads=1,
                             seed=seed, extractor=extractor, log_target=log_target)
    model.params.update(params or {})
    model.fit(idx[tr].tolist(), gflops[tr].tolist(), 64)
    pred = model.predict(idx[te].tolist())
    truth = gflops[te]
    rho = spearman(pred, truth)
    pick = np.argsort(-pred)[:top]
    best = truth.max()
    quality = float(np.mean(truth[pick]) / best) if best > 0 else 0.0
    elite = set(np.argsort(-truth)[: max(1, len(truth) // 20)].tolist())
    recall = len(elite & set(pick.tolist())) / len(elite)
    hit90 = float(truth[pick].max() >= 0.9 * gflops.max())
    return rho, quality, recall, hit90


def simulate_tuning(task, extractor: FeatureExtractor, idx: np.ndarray, gflops: np.ndarray,
                    seed: int, n_trial: int, plan_size: int = 64, log_target: bool = False,
                    loss: str = "reg", target: float = 0.9) -> int | None:
    """Trials an XGB tuner needs to reach ``target`` x the best measured config when its space
    is only the measured configs: the first ``plan_size`` picks are uniform, then every
    ``plan_size`` trials the model is refitted on all measured picks and the next plan is its
    top ``plan_size`` unvisited configs (found exhaustively, as SA nearly does; the last 5%
    of each plan uniform, as ModelBasedTuner). None if not within ``n_trial``.

    NOTE: a measured subset keeps the share of good configs of a uniform sample (not of
    tuner-picked caches, which over-represent good ones), so this compares tuner settings
    cheaply; the replay of an exhaustive table (sample_efficiency.py --replay) is the real test.
    """
    rng = np.random.default_rng(seed)
    goal = target * gflops.max()
    order = list(rng.permutation(len(idx))[:plan_size])
    visited = set(order)
    n_tail = int(0.05 * plan_size)
    while len(order) < min(n_trial, len(idx)):
        model = XGBoostCostModel(task, extractor.feature_type, loss_type=loss, num_threads=1,
                                 seed=int(rng.integers(2**31)), extractor=extractor,
                                 log_target=log_target)
        model.fit(idx[order].tolist(), gflops[order].tolist(), plan_size)
        rest = np.asarray([i for i in range(len(idx)) if i not in visited])
        pred = model.predict(idx[rest].tolist())
        plan = [int(j) for j in rest[np.argsort(-pred, kind="stable")][:plan_size - n_tail]]
        pool = [int(j) for j in rest if int(j) not in set(plan)]
        plan += [int(j) for j in rng.choice(pool, size=min(n_tail, len(pool)), replace=False)]
        for j in plan[: n_trial - len(order)]:
            order.append(j)
            visited.add(j)
    hit = np.flatnonzero(gflops[order] >= goal)
    return int(hit[0]) + 1 if len(hit) else None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True)
    p.add_argument("--workload", default="dense", choices=sorted(WORKLOADS))
    p.add_argument("--template", help="template name (default: the wide one)")
    p.add_argument("--feature-types", default="knob,itervar,curve")
    p.add_argument("--losses", default="reg,rank")
    p.add_argument("--targets", default="raw,log", help="raw: y/max labels; log: log_target")
    p.add_argument("--sizes", default="64,128,256")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--n-workers", type=int, default=2)
    p.add_argument("--params", action="append", default=[],
                   help="xgboost parameter variant 'name:key=value;...' (e.g. "
                        "'d6:max_depth=6;eta=0.1'); repeatable; the default params always run")
    p.add_argument("--simulate", help="instead of ranking: simulated XGB tuning on the measured "
                   "configs, comma-separated variants plan_size/target (e.g. 64/raw,32/log); "
                   "prints trials to 90%% per seed (--repeats seeds)")
    p.add_argument("--n-trial", type=int, default=400)
    a = p.parse_args(argv)
    _, wide, args = WORKLOADS[a.workload]
    tname = a.template or wide
    task = autotvm.task.create(tname, args=args, target="llvm")
    meas = load_measurements(Path(a.cache), f"{tname}{args}")
    idx = np.asarray(sorted(meas), dtype=np.int64)
    gflops = np.asarray([task.flop / meas[i] / 1e9 for i in idx])
    print(f"{tname}: {len(idx)} measured configs, best {gflops.max():.1f} GFLOPS, "
          f"{np.mean(gflops == 0):.0%} failed")
    if a.simulate:
        ext = FeatureExtractor(task, a.feature_types.split(",")[0], a.n_workers)
        ext.get(idx.tolist())
        k = int(np.sum(gflops >= 0.9 * gflops.max()))
        print(f"{k} configs within 90%: Random's expected trials (N+1)/(K+1) = "
              f"{(len(idx) + 1) / (k + 1):.1f}")
        for var in a.simulate.split(","):
            plan, target = var.split("/")
            res = [simulate_tuning(task, ext, idx, gflops, seed, a.n_trial, int(plan),
                                   target == "log") for seed in range(a.repeats)]
            vals = np.asarray([a.n_trial + 1 if r is None else r for r in res], dtype=float)
            print(f"{ext.feature_type} plan {plan} {target}: trials to 90% {res}; median "
                  f"{np.median(vals):.0f}, mean {np.mean(vals):.1f} (never = {a.n_trial + 1})",
                  flush=True)
        ext.close()
        return 0
    print(f"{'features':9s}{'loss':10s}{'params':8s}{'n':>5s}{'spearman':>10s}{'top64 q':>9s}"
          f"{'top5% rec':>10s}{'hit90':>7s}")
    variants: list[tuple[str, dict[str, Any]]] = [("default", {})]
    for spec in a.params:
        name, _, body = spec.partition(":")
        kw = {}
        for item in filter(None, body.split(";")):
            key, _, val = item.partition("=")
            kw[key.strip()] = ast.literal_eval(val.strip())
        variants.append((name, kw))
    for ft in a.feature_types.split(","):
        ext = FeatureExtractor(task, ft, a.n_workers)
        ext.get(idx.tolist())
        for loss in a.losses.split(","):
            for target in a.targets.split(","):
                for vname, params in variants:
                    for n in (int(v) for v in a.sizes.split(",")):
                        if n >= len(idx) - 64:
                            continue
                        res = np.asarray([evaluate(task, ext, idx, gflops, n, loss, seed,
                                                   log_target=target == "log", params=params)
                                          for seed in range(a.repeats)])
                        med = np.median(res, axis=0)
                        print(f"{ft:9s}{loss + '/' + target:10s}{vname:8s}{n:5d}{med[0]:10.3f}"
                              f"{med[1]:9.3f}{med[2]:10.3f}{np.mean(res[:, 3]):7.2f}",
                              flush=True)
        ext.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
