"""Cost models on a log recorded by really tuning a small dense template on this CPU
(tests/data/xgb_dense128_random.log, produced by ``python tests/test_xgb_fixtures.py``)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_xgb_fixtures import DENSE_SMALL, DENSE_SMALL_ARGS, RECORDED_LOG

from templtune import autotvm
from templtune.autotvm.record import load_from_file
from templtune.autotvm.tuner.metric import spearman
from templtune.autotvm.tuner.sklearn_cost_model import SklearnCostModel
from templtune.autotvm.tuner.xgboost_cost_model import XGBoostCostModel, record_flops

LOG = os.path.join(os.path.dirname(__file__), "data", RECORDED_LOG)


@pytest.fixture(scope="module")
def data():
    task = autotvm.task.create(DENSE_SMALL, args=DENSE_SMALL_ARGS, target="llvm")
    recs = list(load_from_file(LOG))
    assert len(recs) >= 200
    seen: dict[int, float] = {}
    for inp, res in recs:
        assert inp.task.name == DENSE_SMALL
        seen[int(inp.config.index)] = record_flops(inp, res)
    idx = np.asarray(list(seen))
    ys = np.asarray([seen[i] for i in idx])
    assert (ys > 0).mean() > 0.9  # the real pipeline built and ran nearly everything
    perm = np.random.default_rng(0).permutation(len(idx))
    n_train = 2 * len(idx) // 3
    tr, te = perm[:n_train], perm[n_train:]
    return task, recs, idx[tr], ys[tr], idx[te], ys[te]


@pytest.mark.parametrize("feature_type,loss", [("itervar", "reg"), ("itervar", "rank"),
                                               ("knob", "reg"), ("curve", "reg")])
def test_xgb_ranks_held_out_configs(data, feature_type, loss):
    task, _, xtr, ytr, xte, yte = data
    model = XGBoostCostModel(task, feature_type, loss_type=loss, num_threads=1, n_workers=0,
                             seed=0)
    model.fit(xtr, ytr, plan_size=64)
    rho = spearman(model.predict(xte), yte)
    assert rho > 0.5, f"{feature_type}/{loss}: Spearman {rho:.3f}"


def test_sklearn_ranks_held_out_configs(data):
    task, _, xtr, ytr, xte, yte = data
    model = SklearnCostModel(task, "itervar", estimator="gbr", n_workers=0, seed=0)
    model.fit(xtr, ytr, plan_size=64)
    assert spearman(model.predict(xte), yte) > 0.5


def test_fit_log_on_recorded_records(data):
    task, recs, _, _, xte, yte = data
    held = set(xte.tolist())
    train = [(i, r) for i, r in recs if int(i.config.index) not in held]
    model = XGBoostCostModel(task, "itervar", num_threads=1, n_workers=0, seed=0)
    assert model.fit_log(train, plan_size=32, min_seed_records=100)
    assert spearman(model.predict(xte), yte) > 0.5
