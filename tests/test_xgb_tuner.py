"""XGBTuner / ModelBasedTuner end to end on a fake runner (no compilation)."""

from __future__ import annotations

import numpy as np
import pytest
from test_xgb_fixtures import SynthTask, records

from templtune.autotvm.tuner.index_based import RandomTuner
from templtune.autotvm.tuner.model_based_tuner import ModelBasedTuner, submodular_pick
from templtune.autotvm.tuner.sa_model_optimizer import SimulatedAnnealingOptimizer
from templtune.autotvm.tuner.sklearn_cost_model import SklearnCostModel
from templtune.autotvm.tuner.xgboost_tuner import XGBTuner
from templtune.measure.fake import FakeBuilder, FakeRunner, ReplayRunner
from templtune.measure.measure import measure_option


def _option(task, n_parallel=16):
    runner = FakeRunner(cost_fn=task.cost)
    return measure_option(FakeBuilder(n_parallel=n_parallel), runner), runner


def _fast_sa(task, seed=0):
    return SimulatedAnnealingOptimizer(task, n_iter=120, parallel_size=64, early_stop=30,
                                       seed=seed)


def test_xgb_tuner_runs_no_repeats_and_beats_random():
    task = SynthTask()
    best = {}
    for name in ("xgb", "random"):
        found = []
        for seed in (0, 1):
            opt, runner = _option(task)
            if name == "xgb":
                tuner = XGBTuner(task, plan_size=32, feature_type="knob", num_threads=1,
                                 optimizer=_fast_sa(task, seed), seed=seed)
            else:
                tuner = RandomTuner(task, seed=seed)
            tuner.tune(n_trial=160, measure_option=opt)
            assert len(runner.measured) == 160
            assert len(set(runner.measured)) == 160
            found.append(tuner.best_flops)
        best[name] = np.mean(found)
    # the optimum gives 1e12 FLOP/s; the model-guided search should get much closer than random
    assert best["xgb"] > best["random"]
    assert best["xgb"] > 0.8e12


def test_plan_and_epsilon_greedy():
    task = SynthTask()
    opt, _ = _option(task, n_parallel=8)
    tuner = XGBTuner(task, plan_size=32, feature_type="knob", num_threads=1,
                     optimizer=_fast_sa(task), seed=0)
    tuner.tune(n_trial=40, measure_option=opt)
    assert tuner.train_ct == 1 and len(tuner.trials) == 32
    assert len(tuner.xs) == 40 and len(tuner.visited) == 40
    (stats,) = tuner.round_stats
    assert set(stats) == {"trials", "extract", "fit", "optimize"}
    assert stats["fit"] > 0 and stats["optimize"] > 0 and stats["extract"] >= 0
    # trial_pt walks the plan; the model's picks come from the plan
    planned = set(tuner.trials) & set(tuner.xs[32:])
    assert len(planned) >= 6


def test_deterministic_with_seed():
    task = SynthTask()
    runs = []
    for _ in range(2):
        opt, runner = _option(task)
        XGBTuner(task, plan_size=16, feature_type="knob", num_threads=1,
                 optimizer=_fast_sa(task, 5), seed=5).tune(n_trial=48, measure_option=opt)
        runs.append(runner.measured)
    assert runs[0] == runs[1]


def test_diversity_filter_and_sklearn_model():
    task = SynthTask()
    opt, runner = _option(task)
    model = SklearnCostModel(task, feature_type="knob", estimator="gbr", seed=0)
    tuner = ModelBasedTuner(task, model, _fast_sa(task), plan_size=16,
                            diversity_filter_ratio=2, seed=0)
    tuner.tune(n_trial=64, measure_option=opt)
    assert len(set(runner.measured)) == 64 and tuner.train_ct >= 2
    with pytest.raises(ValueError, match="diversity_filter_ratio"):
        ModelBasedTuner(task, model, _fast_sa(task), plan_size=16, diversity_filter_ratio=0.5)
    with pytest.raises(TypeError, match="optimizer"):
        XGBTuner(task, optimizer="ga")


def test_submodular_pick_diversity():
    knobs = [[0, 0], [0, 0], [1, 1], [0, 1]]
    assert submodular_pick(np.zeros(4), knobs, 2) == [0, 2]
    assert submodular_pick(np.array([0, 5, 0, 0]), knobs, 1) == [1]


def test_load_history_transfer_and_resume():
    task = SynthTask(args=(1,))
    other = SynthTask(args=(2,))
    rng = np.random.default_rng(0)
    hist = records(other, rng.choice(len(other.config_space), 200, replace=False))
    own = records(task, range(10))
    tuner = XGBTuner(task, plan_size=16, feature_type="knob", num_threads=1,
                     optimizer=_fast_sa(task), seed=0)
    tuner.load_history(hist + own, min_seed_records=100)
    # own records resume the tuner; the base model seeds the first plan
    assert set(range(10)) <= tuner.visited and tuner.xs == list(range(10))
    assert len(tuner.trials) == 16 and tuner.cost_model.base_model is not None
    opt, runner = _option(task)
    tuner.tune(n_trial=16, measure_option=opt)
    assert not set(runner.measured) & set(range(10))
    # too few records: no base model, nothing planned
    t2 = XGBTuner(task, plan_size=16, feature_type="knob", optimizer=_fast_sa(task), seed=0)
    t2.load_history(hist[:20], min_seed_records=100)
    assert t2.trials == [] and t2.cost_model.base_model is None


def test_replay_runner_with_errors():
    task = SynthTask(dims=(4, 4, 4, 4))
    recs = records(task, range(len(task.config_space)), error_every=7)
    opt = measure_option(FakeBuilder(n_parallel=8), ReplayRunner(recs))
    tuner = XGBTuner(task, plan_size=16, feature_type="knob", num_threads=1,
                     optimizer=_fast_sa(task), seed=0)
    tuner.tune(n_trial=len(task.config_space), measure_option=opt)
    assert len(tuner.visited) == len(task.config_space) and not tuner.has_next()
    best = max(task.flop / res.mean_cost for _, res in recs if res.ok)
    assert tuner.best_flops == pytest.approx(best)


def test_resume_from_log(tmp_path):
    from templtune.autotvm.callback import log_to_file

    task = SynthTask()
    log = tmp_path / "synth.log"
    opt, first = _option(task, n_parallel=8)
    XGBTuner(task, plan_size=16, feature_type="knob", num_threads=1,
             optimizer=_fast_sa(task), seed=0).tune(n_trial=40, measure_option=opt,
                                                    callbacks=[log_to_file(str(log))])
    opt, second = _option(task, n_parallel=8)
    tuner = XGBTuner(task, plan_size=16, feature_type="knob", num_threads=1,
                     optimizer=_fast_sa(task), seed=1)
    tuner.tune(n_trial=64, measure_option=opt, resume_log=str(log))
    assert len(second.measured) == 24
    assert not set(second.measured) & set(first.measured)
    # the resumed records trained the model (40 >= 2 plans of 16)
    assert tuner.train_ct >= 2 and len(tuner.xs) == 64
