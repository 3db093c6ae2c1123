"""auto_scheduler names TVM users reach for: LayoutRewriteOption, DispatchContext (nesting and
the root fallback), ApplyHistoryBestOrSample, PreloadCustomSketchRule and the task input buffer
registry."""

from __future__ import annotations

import time

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler, te
from templtune.auto_scheduler import (
    ApplyHistoryBest,
    ApplyHistoryBestOrSample,
    ComputeDAG,
    DispatchContext,
    LayoutRewriteOption,
    PreloadCustomSketchRule,
    SearchTask,
    SketchPolicy,
)
from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
from templtune.auto_scheduler.search_task import HardwareParams
from templtune.auto_scheduler.task_input import TaskInputError
from templtune.errors import TargetError

HW4 = HardwareParams(4, 64, 64, 0, 0, 0, 0, 0)


def _matmul(n: int) -> list:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")]


def _task(n: int = 64) -> SearchTask:
    return SearchTask(compute_dag=ComputeDAG(_matmul(n)), target="llvm", hardware_params=HW4)


# ----------------------------------------------------------------------------- LayoutRewriteOption
def test_layout_rewrite_option_values_and_target_defaults() -> None:
    assert [int(o) for o in LayoutRewriteOption] == [0, 1, 2]
    get = LayoutRewriteOption.get_target_default
    assert get("llvm -mcpu=core-avx2") is LayoutRewriteOption.INSERT_TRANSFORM_STAGE
    assert get("llvm", in_relay_integration=True) is LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED
    with pytest.raises(TargetError, match="opencl"):
        get("opencl -device=mali")  # no OpenCL backend here
    assert get("cuda") is LayoutRewriteOption.NO_REWRITE
    assert get("cuda", True) is LayoutRewriteOption.NO_REWRITE
    task = SearchTask(compute_dag=ComputeDAG(_matmul(16)), target="llvm",
                      layout_rewrite_option=LayoutRewriteOption.NO_REWRITE)
    assert task.layout_rewrite_option == 0


# ----------------------------------------------------------------------------- DispatchContext
def _record(task: SearchTask, state, cost: float) -> tuple:
    return (MeasureInput(task, state), MeasureResult((cost,), 0, "", 1.0, time.time()))


def test_dispatch_contexts_nest_and_fall_back() -> None:
    task = _task()
    states = SketchPolicy(task, seed=0, verbose=0).sample_initial_population(2)
    key = task.workload_key
    root = DispatchContext.current
    assert isinstance(root, auto_scheduler.FallbackContext)
    assert root.query("llvm", key) is None
    outer = ApplyHistoryBest([_record(task, states[0], 1e-3)])
    inner = ApplyHistoryBest([])
    with outer:
        assert DispatchContext.current is outer
        with inner:
            assert DispatchContext.current is inner
            # the inner context has no record: the query falls back to the outer one
            assert inner.query("llvm", key) is states[0]
            inner.update("llvm", key, states[1])
            assert inner.query("llvm", key) is states[1]
        assert DispatchContext.current is outer
        assert outer.query("llvm", key) is states[0]
        assert outer.query("cuda", key) is None
    assert DispatchContext.current is root
    assert ApplyHistoryBest.current() is None


def test_fallback_context_warns_once_for_complex_ops(caplog) -> None:
    fb = auto_scheduler.FallbackContext(verbose=1)
    with caplog.at_level("WARNING", logger="auto_scheduler"):
        for _ in range(3):
            assert fb.query("llvm", '["k1"]', has_complex_op=True) is None
        fb.query("llvm", '["k2"]', has_complex_op=False)
    warns = [r for r in caplog.records if "Cannot find tuned schedules" in r.getMessage()]
    assert len(warns) == 1 and '["k1"]' in warns[0].getMessage()


# ----------------------------------------------------------------------------- OrSample
def test_apply_history_best_or_sample_builds_a_correct_schedule() -> None:
    task = _task(32)
    key = task.workload_key
    ctx = ApplyHistoryBestOrSample(None, num_measure=-1)
    with ctx:
        state = ctx.query(task.target, key, has_complex_op=True, dag=task.compute_dag)
    assert state is not None and state.transform_steps  # a sampled (tiled) schedule
    assert ctx.query(task.target, key) is state  # cached: no second search
    # a simple workload is not sampled unless asked
    x = te.placeholder((8,), name="x")
    ew = ComputeDAG([x, te.compute((8,), lambda i: x[i] + 1.0, name="y")])
    assert ctx.query("llvm", ew.workload_key(), has_complex_op=False, dag=ew) is None
    sch, args = task.compute_dag.apply_steps_from_state(state)
    f = templtune.build(sch, list(args), target="llvm")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 32)).astype("float32")
    b = rng.standard_normal((32, 32)).astype("float32")
    c = np.zeros((32, 32), dtype="float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- custom sketch
def test_preload_custom_sketch_rule_replaces_the_built_in_rules() -> None:
    def meet(policy, state, stage_id):
        return PreloadCustomSketchRule.APPLY_AND_SKIP_REST

    def apply(policy, state, stage_id):
        c = len(state.stages) - 1
        return [[state, -1], [state.split(c, 0, [8, 2]), -1]]

    task = _task(512)
    default = SketchPolicy(task, seed=0, verbose=0).generate_sketches()
    assert len(default) == 3
    policy = SketchPolicy(task, seed=0, verbose=0,
                          init_search_callbacks=[PreloadCustomSketchRule(meet, apply)])
    sk = policy.generate_sketches()
    assert len(sk) == 2
    assert [it.extent for it in sk[0].stages[2].iters][:1] == [512]
    assert [it.extent for it in sk[1].stages[2].iters][:3] == [32, 8, 2]

    def skip_all(policy, state, stage_id):
        return PreloadCustomSketchRule.PASS

    passed = SketchPolicy(task, seed=0, verbose=0,
                          init_search_callbacks=[PreloadCustomSketchRule(skip_all, apply)])
    assert len(passed.generate_sketches()) == 3


# ----------------------------------------------------------------------------- task inputs
def test_task_input_buffers(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    key = '["test_auto_scheduler_dropin", 1]'
    idx = np.arange(12, dtype="int32").reshape(3, 4)
    got = auto_scheduler.register_task_input_buffer(key, "indices", idx, save_to_file=True)
    assert got is idx
    assert auto_scheduler.get_task_input_buffer(key, "indices") is idx
    assert (tmp_path / "indices.3_4_int32.npy").exists()
    with pytest.raises(TaskInputError, match="already registered"):
        auto_scheduler.register_task_input_buffer(key, "indices", idx + 1)
    auto_scheduler.register_task_input_buffer(key, "indices", idx + 1, overwrite=True)
    np.testing.assert_array_equal(auto_scheduler.get_task_input_buffer(key, "indices"), idx + 1)
    # another workload finds the saved file (TVM's resume path)
    np.testing.assert_array_equal(auto_scheduler.get_task_input_buffer('["other"]', "indices"),
                                  idx)
    with pytest.raises(ValueError, match="not registered"):
        auto_scheduler.get_task_input_buffer(key, "missing")
    task = SearchTask(compute_dag=ComputeDAG(_matmul(8)), target="llvm",
                      task_inputs={"A": np.ones((8, 8), "float32")}, task_inputs_overwrite=True)
    assert task.task_input_names == ("A",)
    assert auto_scheduler.get_task_input_buffer(task.workload_key, "A").shape == (8, 8)


@auto_scheduler.register_workload("test_auto_scheduler_dropin/gather", override=True)
def _gather(n: int) -> list:
    a = te.placeholder((n,), name="A")
    idx = te.placeholder((n,), name="idx", dtype="int32")
    return [a, idx, te.compute((n,), lambda i: a[idx[i]] * 2.0, name="out")]


def test_task_inputs_are_what_the_runner_measures_with() -> None:
    from templtune.auto_scheduler.measure import LocalBuilder, LocalRunner

    n = 64
    perm = np.random.default_rng(1).permutation(n).astype("int32")
    task = SearchTask(func=_gather, args=(n,), target="llvm", task_inputs={"idx": perm},
                      task_inputs_overwrite=True)
    state = task.compute_dag.get_init_state()
    inputs = [MeasureInput(task, state)]
    builder, runner = LocalBuilder(n_parallel=1), LocalRunner(timeout=60, number=1, repeat=1,
                                                              min_repeat_ms=0)
    try:
        (res,) = runner.run(inputs, builder.build(inputs, verbose=0), verbose=0)
        assert res.error_no == 0, res.error_msg
        fed = runner.ref_input
        np.testing.assert_array_equal(fed[1], perm)  # the registered index array
        assert fed[0].dtype == np.float32 and np.abs(fed[0]).max() > 0  # random data
    finally:
        builder.close()
        runner.close()
