"""Issue 16 items 2-4: the check compares element-wise, sees unwritten outputs, and takes each
candidate's arguments from its own build."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from fault_kernels import N, PartialRelu

from templtune.autotvm.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    create_measure_batch,
    measure_option,
)
from templtune.autotvm.task.task import create
from templtune.measure import worker


def _measure(name, args, pick, **runner_kw):
    task = create(name, args, "llvm")
    space = task.config_space
    configs = [space.get(i) for i in range(len(space))]
    runner_kw.setdefault("cooldown_interval", 0)
    opt = measure_option(LocalBuilder(n_parallel=2, timeout=60),
                         LocalRunner(timeout=60, number=1, repeat=1, **runner_kw))
    batch = create_measure_batch(task, opt)
    try:
        return batch([MeasureInput(task.target, task, c) for c in pick(configs)]), opt
    finally:
        batch.close()


@pytest.mark.slow
def test_tolerance_is_element_wise():
    # NOTE: exp(20 A) spans 2e-9 .. 5e8: a tolerance scaled by max|ref| passes zeroed rows.
    (ok, low), _ = _measure("faults/exp20", (N,), lambda cs: cs)
    assert ok.error_no == MeasureErrorNo.NO_ERROR, ok.error_detail[:500]
    assert low.error_no == MeasureErrorNo.WRONG_ANSWER, low.error_detail[:500]


def test_compare_rule():
    ref = np.array([1e6, 1.0, 1e-6], "float32")
    assert worker.compare(ref * (1 + 5e-4), ref, 1e-3, 1e-3) == ""
    assert worker.compare(np.array([1e6, 1.0, 0.0], "float32"), ref, 1e-3, 1e-3) == ""
    assert worker.compare(np.array([0.0, 1.0, 1e-6], "float32"), ref, 1e-3, 1e-3)
    assert worker.compare(np.array([1e6, np.nan, 1e-6], "float32"), ref, 1e-3, 1e-3)
    assert worker.compare(np.array([1, 2], "int32"), np.array([1, 3], "int32"), 0, 0)


@pytest.mark.slow
def test_unwritten_outputs_fail():
    """A kernel writing only its positive outputs (relu) was right on zero-filled buffers."""
    task = create("faults/relu", (64,), "llvm")
    inp = MeasureInput(task.target, task, task.config_space.get(0))
    builder = LocalBuilder(n_parallel=1, timeout=60)
    runner = LocalRunner(timeout=60, number=1, repeat=1, cooldown_interval=0)
    builder.set_task(task)
    runner.set_task(task)
    try:
        (br,) = builder.build([inp])
        assert br.ok, br.error_detail
        good = runner.run([inp], [br])[0]
        fake = dataclasses.replace(br, artifact=worker._PICKLED + pickle.dumps(PartialRelu()))
        partial = runner.run([inp], [fake])[0]
    finally:
        builder.close()
        runner.close()
    assert good.error_no == MeasureErrorNo.NO_ERROR, good.error_detail[:500]
    assert partial.error_no == MeasureErrorNo.WRONG_ANSWER, partial.error_detail[:500]


@pytest.mark.slow
def test_argument_info_comes_from_each_build():
    """Configs 0-8 do not instantiate and ``m`` changes the argument shapes."""
    results, opt = _measure("faults/shapes", (N,), lambda cs: [c for c in cs
                                                              if c["broken"].val < 0])
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR] * 2, [
        r.error_detail[:300] for r in results]
    assert all(r.checked for r in results)


@pytest.mark.slow
def test_reference_does_not_depend_on_measurement_order():
    """A wrong config measured first must not become the reference of its signature."""
    def wrong_first(cs):
        return [c for c in cs if c["mode"].val == "zero"][:1] + [
            c for c in cs if c["mode"].val == "ok"][:1]

    (zero, ok), _ = _measure("faults/matmul", (N,), wrong_first)
    assert zero.error_no == MeasureErrorNo.WRONG_ANSWER, zero.error_detail[:300]
    assert ok.error_no == MeasureErrorNo.NO_ERROR, ok.error_detail[:300]
