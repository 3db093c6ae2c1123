"""The sample-efficiency benchmark's wide spaces (benchmarks/wide_templates.py) and the
XGBTuner's shared feature extractor."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from test_xgb_fixtures import SynthTask

import templtune
from templtune import autotvm
from templtune.autotvm.feature.extract import FeatureExtractor
from templtune.autotvm.tuner.sa_model_optimizer import SimulatedAnnealingOptimizer
from templtune.autotvm.tuner.xgboost_tuner import XGBTuner
from templtune.measure.fake import FakeBuilder, FakeRunner
from templtune.measure.measure import measure_option
from templtune.topi import testing as ref

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import wide_templates as wt  # noqa: E402


def _run(task, cfg, arrays, shape):
    with autotvm.ApplyConfig(cfg):
        s, args = task.func(*task.args)
    mod = templtune.build(s, args, target="llvm")
    out = np.zeros(shape, np.float32)
    mod(*arrays, out)
    return out


def test_dense_wide_space_is_wide_and_matches_numpy():
    m, n, k = 16, 32, 24
    task = autotvm.task.create("sample_efficiency/dense_wide", (m, n, k), "llvm")
    space = task.config_space
    # 3-way split of 16 (15) x 2-way of 32 (6) x 2-way of 24 (8); the unroll cap drops only
    # rb = 16, ku = 24, bn = 32 (16 * 24 * 4 vectors)
    assert space.range_length == 15 * 6 * 8
    assert len(space) == space.range_length - 1
    assert task.flop == 2 * m * n * k
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    for i in space.sample_ints(6, rng=np.random.default_rng(1)):
        out = _run(task, space.get(int(i)), [a, w], (m, n))
        np.testing.assert_allclose(out, a @ w.T, rtol=1e-3, atol=1e-3)


def test_dense_wide_cap_filters_only_huge_unrolled_blocks():
    task = autotvm.task.create("sample_efficiency/dense_wide", (1024, 1024, 1024), "llvm")
    space = task.config_space
    assert space.range_length == 66 * 11 * 11
    assert 3000 < len(space) < space.range_length
    for i in space.sample_ints(50, rng=np.random.default_rng(2)):
        cfg = space.get(int(i))
        rb, ku, bn = cfg["tile_y"].size[-1], cfg["tile_k"].size[-1], cfg["tile_x"].size[-1]
        assert rb * ku * -(-bn // 8) <= wt.MAX_UNROLLED_REGS


def test_conv_wide_space_reorders_reductions_and_matches_numpy():
    args = (1, 5, 5, 16, 8, 3, 3, (1, 1), (1, 1))
    task = autotvm.task.create("sample_efficiency/conv2d_wide", args, "llvm")
    space = task.config_space
    assert set(space.space_map) == {"tile_oc", "tile_oh", "tile_ow", "tile_ic", "unroll_kw",
                                    "reorder_r"}
    assert len(space.space_map["reorder_r"]) == 24
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 5, 5)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    expected = ref.conv2d_nchw_python(x, w, (1, 1), (1, 1))
    orders = set()
    for i in space.sample_ints(6, rng=np.random.default_rng(4)):
        cfg = space.get(int(i))
        orders.add(cfg["reorder_r"].val)
        np.testing.assert_allclose(_run(task, cfg, [x, w], expected.shape), expected,
                                   rtol=1e-3, atol=1e-3, err_msg=str(cfg))
    assert len(orders) > 1


def test_conv_wide_reorder_changes_the_loop_order():
    args = (1, 5, 5, 16, 8, 3, 3, (1, 1), (1, 1))
    task = autotvm.task.create("sample_efficiency/conv2d_wide", args, "llvm")
    space = task.config_space
    stride = int(np.prod(space.dims[:-1]))  # reorder_r is the last (most significant) knob

    def reduce_order(index):
        with autotvm.ApplyConfig(space.get(index)):
            s, _ = task.func(*task.args)
        st = next(st for st in s.stages if st.op.name.endswith(".global"))
        red = {id(r): r.var.name for r in st.op.reduce_axis}
        return [red[id(v)] for v in st.leaf_iter_vars if id(v) in red]

    base = reduce_order(0)
    last = reduce_order(23 * stride)
    assert base == [base[i] for i in wt.REDUCE_ORDERS[0]]
    assert last == [base[i] for i in wt.REDUCE_ORDERS[23]] != base


def test_xgb_tuners_can_share_one_feature_cache():
    task = SynthTask()
    ext = FeatureExtractor(task, "knob", n_workers=0)
    seen = []
    for seed in (0, 1):
        tuner = XGBTuner(task, plan_size=32, feature_type="knob", num_threads=1,
                         optimizer=SimulatedAnnealingOptimizer(task, n_iter=60, parallel_size=32,
                                                               early_stop=20, seed=seed),
                         seed=seed, extractor=ext)
        assert tuner.cost_model.extractor is ext
        opt = measure_option(FakeBuilder(n_parallel=16), FakeRunner(cost_fn=task.cost))
        tuner.tune(n_trial=96, measure_option=opt)
        seen.append(len(tuner.xs))
    assert seen == [96, 96]


def test_xgb_tuner_rejects_an_extractor_of_another_feature_type():
    task = SynthTask()
    with pytest.raises(ValueError, match="extracts 'knob' features"):
        XGBTuner(task, feature_type="itervar", extractor=FeatureExtractor(task, "knob", 0))


def test_xgb_tuner_passes_log_target_to_its_model():
    task = SynthTask()
    assert XGBTuner(task, feature_type="knob", log_target=False).cost_model.log_target is False
    assert XGBTuner(task, feature_type="knob", log_target=True).cost_model.log_target is True


def test_xgb_tuner_defaults_are_autotvm_s():
    """plan_size 64 and plain y/max labels (the measured alternative, 32 + log labels, was
    better on dense/wide but worse on conv2d/wide: see XGBTuner's Notes); both stay options."""
    task = SynthTask()
    tuner = XGBTuner(task, feature_type="knob")
    assert tuner.plan_size == 64 and tuner.cost_model.log_target is False
    alt = XGBTuner(task, feature_type="knob", plan_size=32, log_target=True)
    assert alt.plan_size == 32 and alt.cost_model.log_target is True
