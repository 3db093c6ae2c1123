"""auto_scheduler XGBModel on per-store features: pack-sum objective, ranking of real measured
states, warm-up, save/load, update_from_file.

The fixture ``data/as_dense128_records.json`` holds 97 records of dense 128^3
(``out = data @ weight.T``) measured on this project's 2-core machine with the real builder and
``LocalRunner`` (one thread): the naive state first, then 96 states sampled from the
SketchPolicy's initial population with 0-2 mutations each. Regenerate with
``TEMPLTUNE_NUM_THREADS=1 python benchmarks/as_cost_model.py record --n 128 --count 96 --seed 0
--log F`` then ``... record --n 128 --count 0 --with-init --log F`` (the naive state is then
last; the tests find it by its empty step list).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from templtune import auto_scheduler as auto
from templtune import te
from templtune.auto_scheduler.cost_model import XGBModel, pack_sum_objective, pack_sum_rmse
from templtune.auto_scheduler.feature import normalized_throughputs

LOG = os.path.join(os.path.dirname(__file__), "data", "as_dense128_records.json")


@auto.register_workload("bench_cm_dense", override=True)
def dense(M, N, K):
    data = te.placeholder((M, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    k = te.reduce_axis((0, K), name="k")
    out = te.compute((M, N), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k), name="out",
                     attrs={"layout_free_placeholders": [weight]})
    return [data, weight, out]


@pytest.fixture(scope="module")
def measured():
    task = auto.SearchTask(func=dense, args=(128, 128, 128), target="llvm")
    inputs, results = auto.RecordReader(LOG).read_lines()
    assert len(inputs) == 97 and all(r.error_no == 0 for r in results)
    dag = task.compute_dag
    inputs = [auto.MeasureInput(task, dag.replay(i.state.transform_steps)) for i in inputs]
    y, _ = normalized_throughputs(inputs, results)
    return task, inputs, results, y


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def _model(seed: int = 1) -> XGBModel:
    m = XGBModel(num_warmup_sample=-1, seed=seed)
    m.params["nthread"] = 1
    return m


def test_pack_sum_objective_is_the_gradient_of_the_summed_loss() -> None:
    rng = np.random.default_rng(0)
    group = np.array([0, 0, 1, 2, 2, 2])
    y, w = np.array([0.5, 1.0, 0.2]), np.array([0.5, 1.0, 0.2])
    preds = rng.normal(size=6)

    def loss(p: np.ndarray) -> float:
        sums = np.bincount(group, weights=p, minlength=3)
        return float(0.5 * np.sum(w * (sums - y) ** 2))

    grad, hess = pack_sum_objective(group, y, w)(preds, None)
    eps = 1e-6
    num = [(loss(preds + eps * np.eye(6)[r]) - loss(preds - eps * np.eye(6)[r])) / (2 * eps)
           for r in range(6)]
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(hess, w[group])
    name, val = pack_sum_rmse(group, y, w)(preds, None)
    sums = np.bincount(group, weights=preds, minlength=3)
    assert name == "p-rmse"
    assert val == pytest.approx(np.sqrt(np.sum(w * (sums - y) ** 2) / w.sum()))


def test_ranks_held_out_measured_states_better_than_chance(measured) -> None:
    task, inputs, results, y = measured
    scores = []
    for split in range(5):
        perm = np.random.default_rng(100 + split).permutation(len(inputs))
        tr, te_ = perm[:48], perm[48:]
        model = _model(split + 1)
        model.update([inputs[k] for k in tr], [results[k] for k in tr])
        pred = model.predict(task, [inputs[k].state for k in te_])
        scores.append(_spearman(pred, y[te_]))
    # the median over 5 random splits; a model guessing at random scores about 0
    assert np.median(scores) > 0.5, scores
    assert min(scores) > 0.3, scores


def test_prefers_a_tiled_vectorized_state_over_the_naive_one(measured) -> None:
    task, inputs, results, y = measured
    naive = next(k for k, i in enumerate(inputs) if not i.state.transform_steps)
    best = int(np.argmax(y))
    assert y[best] > 20 * y[naive]  # clearly different in the measurements
    assert "vectorize" in str(inputs[best].state)
    keep = [k for k in range(len(inputs)) if k not in (naive, best)]
    model = _model()
    model.update([inputs[k] for k in keep], [results[k] for k in keep])
    p_best, p_naive = model.predict(task, [inputs[best].state, inputs[naive].state])
    assert p_best > p_naive


def test_warmup_save_load_and_update_from_file(measured, tmp_path) -> None:
    task, inputs, results, _ = measured
    model = XGBModel(num_warmup_sample=60, seed=3)
    model.params["nthread"] = 1
    model.update(inputs[:40], results[:40])
    states = [i.state for i in inputs[40:50]]
    p1 = model.predict(task, states)
    assert np.all((p1 >= 0) & (p1 < 1))  # still warming up: random scores
    assert not np.array_equal(p1, model.predict(task, states))
    model.update(inputs[40:], results[40:])
    p = model.predict(task, states)
    np.testing.assert_array_equal(p, model.predict(task, states))  # trained: deterministic
    f = str(tmp_path / "m.json")
    model.save(f)
    m2 = XGBModel()
    m2.load(f)
    np.testing.assert_allclose(m2.predict(task, states), p, rtol=1e-5)
    m3 = _model()
    m3.update_from_file(LOG)
    assert len(m3.xs) == len(inputs) and m3.bst is not None
    assert np.isfinite(m3.predict(task, states)).all()


def test_state_that_does_not_lower_scores_minus_inf(measured) -> None:
    from templtune.auto_scheduler.measure_record import RecordState
    from templtune.auto_scheduler.transform_step import SplitStep

    task, inputs, results, _ = measured
    model = _model()
    model.update(inputs[:20], results[:20])
    bad = RecordState((SplitStep(2, 9, 8, (2,), True),))
    p = model.predict(task, [bad, inputs[0].state])
    assert p[0] == -np.inf and np.isfinite(p[1])
