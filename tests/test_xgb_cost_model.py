"""Cost models (XGBoost, scikit-learn) and metrics on synthetic data."""

from __future__ import annotations

import numpy as np
import pytest
from test_xgb_fixtures import SynthTask, records, synthetic_score

from templtune.autotvm.tuner.metric import (
    average_recall,
    cover_curve,
    max_curve,
    mean_curve,
    recall_curve,
    spearman,
    top_k_hit_rate,
)
from templtune.autotvm.tuner.sklearn_cost_model import SklearnCostModel
from templtune.autotvm.tuner.xgboost_cost_model import XGBoostCostModel


def _split(task, n_train=256, n_test=256, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(task.config_space), n_train + n_test, replace=False)
    tr, te = idx[:n_train], idx[n_train:]
    ys = lambda xs: [synthetic_score(task.config_space.point2knob(int(i))) for i in xs]  # noqa: E731
    return tr, ys(tr), te, ys(te)


def test_metrics():
    assert max_curve([1, 3, 2]).tolist() == [1, 3, 3]
    assert mean_curve([1, 3, 2]).tolist() == [1, 2, 2]
    assert recall_curve([0, 1, 2]).tolist() == [1, 1, 1]
    assert recall_curve([2, 1, 0]).tolist() == [0, 0.5, 1]
    assert recall_curve([0, 5, 1], top=2).tolist() == [0.5, 0.5, 1]
    assert cover_curve([1, 0, 2]).tolist() == [0, 1, 1]
    labels = np.array([0.1, 0.9, 0.5, 0.3])
    assert average_recall(labels, labels, 4) == 1.0
    assert average_recall(-labels, labels, 1) == 0.0
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 50), rng.random(50)
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic)
    assert top_k_hit_rate([3, 2, 1], [3, 1, 2], 1) == 1.0


@pytest.mark.parametrize("loss", ["reg", "rank", "rank-binary"])
def test_xgb_ranks_better_than_chance(loss):
    task = SynthTask()
    tr, ytr, te, yte = _split(task)
    model = XGBoostCostModel(task, feature_type="knob", loss_type=loss, num_threads=1, seed=0)
    model.fit(tr, ytr, plan_size=32)
    pred = model.predict(te)
    assert pred.shape == (len(te),)
    rho = spearman(pred, yte)
    assert rho > (0.5 if loss != "rank-binary" else 0.2), rho
    # deterministic given the seed
    model2 = XGBoostCostModel(task, feature_type="knob", loss_type=loss, num_threads=1, seed=0)
    model2.fit(tr, ytr, plan_size=32)
    np.testing.assert_allclose(model2.predict(te), pred)


@pytest.mark.parametrize("est", ["gbr", "rf"])
def test_sklearn_ranks_better_than_chance(est):
    task = SynthTask()
    tr, ytr, te, yte = _split(task, seed=1)
    model = SklearnCostModel(task, feature_type="knob", estimator=est, num_threads=1, seed=0)
    model.fit(tr, ytr, plan_size=32)
    assert spearman(model.predict(te), yte) > 0.5


def test_bad_arguments_and_unfitted():
    task = SynthTask()
    with pytest.raises(ValueError, match="loss_type"):
        XGBoostCostModel(task, loss_type="hinge")
    with pytest.raises(ValueError, match="feature_type"):
        XGBoostCostModel(task, feature_type="pixels")
    with pytest.raises(ValueError, match="estimator"):
        SklearnCostModel(task, estimator="svm")
    with pytest.raises(RuntimeError, match="before fit"):
        XGBoostCostModel(task, feature_type="knob").predict([0, 1])


@pytest.mark.parametrize("cls", [XGBoostCostModel, SklearnCostModel])
def test_fit_log_and_transfer(cls):
    # records of another workload of the same template train the base model
    other = SynthTask(args=(2,))
    task = SynthTask(args=(1,))
    rng = np.random.default_rng(0)
    recs = records(other, rng.choice(len(other.config_space), 300, replace=False),
                   error_every=10)
    model = cls(task, feature_type="knob", num_threads=1, seed=0)
    base = model.spawn_base_model()
    assert base.extractor is model.extractor
    assert not base.fit_log(recs, plan_size=32, min_seed_records=500)
    wrong_name = SynthTask(name="other_template")
    assert not base.fit_log(records(wrong_name, range(50)), 32, min_seed_records=10)
    assert base.fit_log(recs, plan_size=32, min_seed_records=100)
    tr, ytr, te, yte = _split(task, n_train=64, seed=3)
    assert spearman(base.predict(te), yte) > 0.5
    model.load_basemodel(base)
    model.fit(tr, ytr, plan_size=32)
    assert model.base_model is base and 0.05 < model.discount < 1
    assert spearman(model.predict(te), yte) > 0.5
    # with many samples the base model is dropped
    tr2, ytr2, _, _ = _split(task, n_train=300, n_test=1, seed=4)
    model.fit(tr2, ytr2, plan_size=32)
    assert model.base_model is None
    model.close()


def test_missing_xgboost_is_actionable(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(ImportError, match="pip install xgboost-cpu"):
        XGBoostCostModel(SynthTask(), feature_type="knob")


def test_log_target_scale_is_a_monotone_map_of_the_unit_interval():
    from templtune.autotvm.tuner.xgboost_cost_model import LOG_TARGET_FLOOR, log_target_scale

    y = np.linspace(0.0, 1.0, 101)
    z = log_target_scale(y)
    assert z[0] == 0.0 and z[-1] == pytest.approx(1.0)
    assert np.all(np.diff(z) > 0)
    # slow configs are spread out: 5% of the best maps to log(2)/log(21) of the scale
    assert log_target_scale(np.array([LOG_TARGET_FLOOR]))[0] == pytest.approx(
        np.log(2) / np.log(21))


def test_log_target_trains_on_log_labels_and_ranks_a_skewed_space():
    task = SynthTask()
    tr, ytr, te, yte = _split(task, seed=2)
    # a wide space's skew: most configs a few percent of the best
    skew = lambda y: (np.asarray(y) / max(y)) ** 4  # noqa: E731
    seen = {}
    for log in (False, True):
        model = XGBoostCostModel(task, feature_type="knob", num_threads=1, seed=0,
                                 log_target=log)
        train = model._train

        def spy(x, y, *args, _train=train, _log=log, **kw):
            seen[_log] = np.sort(y)
            return _train(x, y, *args, **kw)

        model._train = spy
        model.fit(tr, skew(ytr), plan_size=32)
        assert spearman(model.predict(te), skew(yte)) > 0.5
        assert model.spawn_base_model().log_target is log
    from templtune.autotvm.tuner.xgboost_cost_model import log_target_scale

    np.testing.assert_allclose(seen[True], log_target_scale(seen[False]), rtol=1e-6)
