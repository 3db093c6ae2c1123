"""Simulated annealing on a synthetic score function."""

from __future__ import annotations

import numpy as np
import pytest
from test_xgb_fixtures import TARGET, SynthTask, synthetic_score

from templtune.autotvm.tuner.model_based_tuner import CostModel
from templtune.autotvm.tuner.sa_model_optimizer import SimulatedAnnealingOptimizer


class ScoreModel(CostModel):
    def __init__(self, space, shift=0.0):
        self.space = space
        self.shift = shift
        self.calls = 0

    def fit(self, xs, ys, plan_size):
        pass

    def fit_log(self, records, plan_size, min_seed_records=500):
        return False

    def predict(self, xs, output_margin=False):
        self.calls += 1
        return np.array([synthetic_score(self.space.point2knob(int(x))) - self.shift
                         for x in xs])

    def spawn_base_model(self):
        return ScoreModel(self.space, self.shift)

    def load_basemodel(self, base_model):
        pass


def test_sa_finds_optimum():
    task = SynthTask()
    space = task.config_space
    opt = SimulatedAnnealingOptimizer(task, n_iter=300, parallel_size=64, early_stop=60, seed=0)
    best = opt.find_maximums(ScoreModel(space), 8, set())
    assert len(best) == 8 and len(set(best)) == 8
    assert best[0] == space.knob2point(list(TARGET))
    scores = [synthetic_score(space.point2knob(b)) for b in best]
    assert scores == sorted(scores, reverse=True)


def test_sa_respects_exclusive_and_keeps_negative_scores():
    task = SynthTask()
    space = task.config_space
    opt = SimulatedAnnealingOptimizer(task, n_iter=200, parallel_size=32, seed=1)
    opt_idx = space.knob2point(list(TARGET))
    # every score negative: AutoTVM would return nothing; we return the full list
    best = opt.find_maximums(ScoreModel(space, shift=5.0), 10, {opt_idx})
    assert len(best) == 10 and opt_idx not in best


def test_sa_deterministic_and_persistent():
    task = SynthTask()
    a = SimulatedAnnealingOptimizer(task, n_iter=50, parallel_size=16, seed=3)
    b = SimulatedAnnealingOptimizer(task, n_iter=50, parallel_size=16, seed=3)
    m = ScoreModel(task.config_space)
    assert a.find_maximums(m, 5, set()) == b.find_maximums(m, 5, set())
    pts = a.points.copy()
    assert len(pts) == 16
    a.find_maximums(m, 5, set())
    assert a.points is not None and a.points.shape == pts.shape


def test_random_walk_changes_one_knob_and_respects_filter():
    task = SynthTask()
    space = task.config_space
    space.multi_filter(lambda e: (e["k0"].val + e["k1"].val) % 2 == 0)
    opt = SimulatedAnnealingOptimizer(task, seed=0)
    pts = opt.sample(32)
    assert len(set(pts.tolist())) == 32
    assert all(space.is_index_valid(int(p)) for p in pts)
    new = opt.random_walk(pts)
    for p, q in zip(pts.tolist(), new.tolist()):
        assert space.is_index_valid(q)
        diff = sum(a != b for a, b in zip(space.point2knob(p), space.point2knob(q)))
        assert diff in (0, 1, 2)  # 0 only if no valid neighbour was found


def test_small_space_and_temperature_scalar():
    task = SynthTask(dims=(3, 2))
    opt = SimulatedAnnealingOptimizer(task, n_iter=20, temp=0.5, parallel_size=128, seed=0)
    assert opt.parallel_size == 6
    best = opt.find_maximums(ScoreModel(task.config_space), 10, set())
    assert sorted(best) == list(range(6))


@pytest.mark.parametrize("early_stop", [None, 5])
def test_early_stop(early_stop):
    task = SynthTask()
    opt = SimulatedAnnealingOptimizer(task, n_iter=100, parallel_size=8, early_stop=early_stop,
                                      seed=0)
    opt.find_maximums(ScoreModel(task.config_space), 1, set())
    if early_stop is None:
        assert opt.last_stats["iterations"] == 100
    else:
        assert opt.last_stats["iterations"] < 100
