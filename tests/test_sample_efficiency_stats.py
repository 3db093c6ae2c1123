"""Tests of the sample-efficiency benchmark's statistics and its exhaustive/replay modes."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from sample_efficiency_stats import (  # noqa: E402
    censored_summary,
    expected_random_trials,
    prob_random_within,
    q_upper_bound,
    trials_to_reach,
)


def _first_hit_distribution(n: int, k: int) -> dict[int, float]:
    """Exact distribution of the first marked position over all orderings (brute force)."""
    counts: dict[int, int] = {}
    total = 0
    for perm in itertools.permutations(range(n)):
        first = next(i for i, v in enumerate(perm) if v < k) + 1
        counts[first] = counts.get(first, 0) + 1
        total += 1
    return {t: c / total for t, c in counts.items()}


@pytest.mark.parametrize(("n", "k"), [(5, 1), (6, 2), (7, 3), (6, 6)])
def test_random_expectation_and_cdf_match_enumeration(n, k):
    dist = _first_hit_distribution(n, k)
    mean = sum(t * p for t, p in dist.items())
    assert expected_random_trials(n, k) == pytest.approx(mean)
    for t in range(n + 1):
        assert prob_random_within(n, k, t) == pytest.approx(
            sum(p for s, p in dist.items() if s <= t))


def test_random_expectation_matches_simulation_on_a_large_space():
    n, k = 3844, 20
    rng = np.random.default_rng(0)
    firsts = [int(np.flatnonzero(rng.permutation(n) < k)[0]) + 1 for _ in range(2000)]
    assert np.mean(firsts) == pytest.approx(expected_random_trials(n, k), rel=0.08)
    assert np.mean(np.asarray(firsts) <= 200) == pytest.approx(prob_random_within(n, k, 200),
                                                               abs=0.03)


def test_random_expectation_edge_cases():
    assert expected_random_trials(10, 0) == math.inf
    assert prob_random_within(10, 0, 10) == 0.0
    assert prob_random_within(10, 3, 8) == 1.0  # 8 draws cannot all miss 3 of 10
    with pytest.raises(ValueError, match="k <= n"):
        expected_random_trials(3, 4)


def test_q_upper_bound_is_clopper_pearson():
    # zero hits: the bound solves (1 - q)^m = 0.05, the "rule of three" ~3/m
    for m in (50, 400, 1200):
        q = q_upper_bound(0, m)
        assert (1 - q) ** m == pytest.approx(0.05)
        assert q == pytest.approx(3 / m, rel=0.05)
    # with hits: P(X <= hits | q_upper) = 0.05 (binomial tail)
    from scipy.stats import binom

    q = q_upper_bound(4, 300)
    assert binom.cdf(4, 300, q) == pytest.approx(0.05)
    assert q_upper_bound(7, 7) == 1.0
    with pytest.raises(ValueError, match="hits"):
        q_upper_bound(3, 2)


def test_trials_to_reach_and_censored_summary():
    assert trials_to_reach([1.0, 5.0, 2.0, 9.0], 5.0) == 2
    assert trials_to_reach([1.0, 2.0], 5.0) is None
    s = censored_summary([10, None, 30], limit=400)
    assert s == {"seeds": 3.0, "reached": 2.0, "median": 30.0,
                 "mean_lower": pytest.approx((10 + 401 + 30) / 3)}
    assert censored_summary([None, None, 5], limit=50)["median"] == math.inf


def test_measure_all_then_replay_serves_every_trial_from_the_table(tmp_path, capsys):
    """--measure-all writes the whole (synthetic) space; --replay then tunes from it alone,
    reports the exact Random expectation of that table, and refuses a table with a hole."""
    import sample_efficiency as se

    cache = tmp_path / "table.json"
    common = ["--fake", "--workloads", "dense", "--space", "library", "--cache", str(cache)]
    assert se.main([*common, "--measure-all"]) == 0
    assert "trial" in capsys.readouterr().err  # the sweep's progress bar draws on stderr
    data = json.loads(cache.read_text())
    (key,) = data
    table = data[key]
    n = len(table)
    assert key.endswith("/fake") and n > 100
    out = tmp_path / "out.json"
    assert se.main([*common, "--replay", "--tuners", "random,ga", "--seeds", "0,1",
                    "--checkpoints", "20,40", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())[0]
    flop = 2 * 1024 ** 3
    gflops = {int(i): flop / np.mean(c) / 1e9 for i, (c, _) in table.items()}
    best = max(gflops.values())
    k = sum(1 for v in gflops.values() if v >= 0.9 * best)
    ex = summary["exhaustive"]
    assert ex["true_best_gflops"] == pytest.approx(best)
    assert ex["n_within_90pct"] == k
    assert ex["random_expected_trials"] == pytest.approx((n + 1) / (k + 1))
    for per_seed in summary["curves"]["random"].values():
        assert len(per_seed) == 40
    # a hole in the table: replay must name the missing config instead of measuring it
    del table[next(iter(table))]
    cache.write_text(json.dumps({key: table}))
    with pytest.raises(KeyError, match="not in the measurement cache"):
        se.main([*common, "--replay", "--tuners", "random", "--seeds", "0",
                 "--checkpoints", str(n)])


def test_uniform_estimate_counts_only_the_uniform_prefixes_once():
    import sample_efficiency as se

    runs = {
        # Random: every trial is uniform; config 7 appears in both seeds (counted once)
        "random": {0: {"curve": [1.0, 9.5, 2.0], "indices": [3, 7, 4], "n_uniform": 3},
                   1: {"curve": [9.5, 1.0], "indices": [7, 5], "n_uniform": 2}},
        # XGB: only the first plan (2 trials here) is uniform; its later hit does not count
        "xgb": {0: {"curve": [1.0, 2.0, 10.0], "indices": [8, 9, 1], "n_uniform": 2}},
    }
    est = se.uniform_estimate(runs, threshold=9.0, n_space=100)
    assert est["samples"] == 6 and est["hits"] == 1  # {3, 7, 4, 5, 8, 9}; only 7 >= 9
    assert est["q"] == pytest.approx(1 / 6)
    assert est["q_upper95"] == pytest.approx(q_upper_bound(1, 6))
    assert est["random_expected_trials"] == pytest.approx(101 / (100 / 6 + 1))
    assert est["random_expected_trials_lower95"] < est["random_expected_trials"]


def test_merge_joins_the_seeds_of_separate_runs(tmp_path):
    import sample_efficiency as se

    outs = []
    for seed in ("0", "1"):
        out = tmp_path / f"s{seed}.json"
        assert se.main(["--fake", "--workloads", "dense", "--space", "library", "--n-workers",
                        "0", "--tuners", "random,xgb", "--seeds", seed, "--checkpoints", "40",
                        "--xgb-opts", "xgb:plan_size=16", "--json", str(out)]) == 0
        outs.append(json.loads(out.read_text())[0])
    merged = se.merge_summaries([str(tmp_path / "s0.json"), str(tmp_path / "s1.json")],
                                n_space=320)
    for t in ("random", "xgb"):
        assert merged["curves"][t] == {"0": outs[0]["curves"][t]["0"],
                                       "1": outs[1]["curves"][t]["1"]}
    best = max(max(c) for o in outs for per in o["curves"].values() for c in per.values())
    assert merged["best_any_gflops"] == pytest.approx(best)
    # uniform draws: all of Random's trials and XGB's first plan (16), distinct configs
    uni = set()
    for o, sd in zip(outs, ("0", "1")):
        uni |= set(o["indices"]["random"][sd]) | set(o["indices"]["xgb"][sd][:16])
    assert merged["uniform_estimate"]["samples"] == len(uni)


def test_simulated_tuning_finds_a_learnable_optimum_after_its_random_plan():
    """model_ranking.simulate_tuning: with throughputs that are a smooth function of the knobs
    (the model can learn them), the first model plan reaches 90% of the best quickly; the
    uniform first plan alone would need (N+1)/(K+1) draws on average."""
    import model_ranking as mr
    import wide_templates  # noqa: F401

    from templtune import autotvm
    from templtune.autotvm.feature.extract import FeatureExtractor

    task = autotvm.task.create("sample_efficiency/dense_wide", args=(1024, 1024, 1024),
                               target="llvm")
    space = task.config_space
    rng = np.random.default_rng(0)
    valid = [i for i in range(space.range_length) if space.is_index_valid(i)]
    idx = np.asarray(sorted(rng.choice(valid, size=600, replace=False)))
    # throughput peaks at a mid-sized x tile and a large k tile (log-scale distances)
    knobs = np.asarray([space.point2knob(int(i)) for i in idx], dtype=float)
    dims = np.asarray(space.dims, dtype=float)
    z = knobs / (dims - 1)
    gflops = 100 * np.exp(-8 * ((z[:, 1] - 0.5) ** 2 + (z[:, 2] - 0.9) ** 2))
    k = int(np.sum(gflops >= 0.9 * gflops.max()))
    ext = FeatureExtractor(task, "knob", 0)
    res = [mr.simulate_tuning(task, ext, idx, gflops, seed, n_trial=200, plan_size=32,
                              log_target=True) for seed in range(3)]
    expected_random = (len(idx) + 1) / (k + 1)
    assert expected_random > 100  # good configs are rare: Random needs ~120 draws here
    assert all(r is not None and r <= 3 * 32 for r in res), (res, k)
    assert np.mean(res) <= 0.5 * expected_random, (res, expected_random)
