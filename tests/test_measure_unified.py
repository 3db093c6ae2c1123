"""One measurement stack: the auto-scheduler measures through the shared Builder/Runner ABCs,
and each record format keeps TVM's failure cost."""

from __future__ import annotations

import json

import pytest

from templtune import auto_scheduler as auto
from templtune import te
from templtune.autotvm import record
from templtune.autotvm.measure import MeasureInput as AtvmInput
from templtune.autotvm.task.task import create, get_config, template
from templtune.measure.local_builder import LocalBuilder
from templtune.measure.local_runner import LocalRunner
from templtune.measure.measure import (
    AUTO_SCHEDULER_ERROR_COST,
    AUTOTVM_ERROR_COST,
    Builder,
    MeasureErrorNo,
    Runner,
    error_result,
)
from templtune.measure.rpc import RPCRunner


@auto.register_workload("test_measure_unified_add", override=True)
def add(n: int) -> list:
    a = te.placeholder((n, n), name="A")
    b = te.compute((n, n), lambda i, j: a[i, j] + 1.0, name="B")
    return [a, b]


@template("test_measure_unified/add")
def add_tmpl(n: int):
    cfg = get_config()
    cfg.define_knob("t", [1, 2])
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    return te.create_schedule(b.op), [a, b]


def test_tvm_names_are_the_shared_classes():
    assert issubclass(auto.LocalBuilder, Builder) and issubclass(auto.LocalRunner, Runner)
    assert issubclass(auto.RPCRunner, RPCRunner)
    r = auto.MeasureResult((1.0,), 0, "msg", 2.0, 3.0)
    assert (r.costs, r.error_no, r.error_msg, r.all_cost, r.timestamp) == ((1.0,), 0, "msg",
                                                                           2.0, 3.0)


@pytest.mark.slow
def test_auto_scheduler_takes_any_runner(tmp_path):
    log = str(tmp_path / "as.json")
    task = auto.SearchTask(func=add, args=(16,), target="llvm")
    runner = LocalRunner(number=1, repeat=1, cooldown_interval=0)
    opt = auto.TuningOptions(num_measure_trials=2, num_measures_per_round=2, verbose=0,
                             builder=LocalBuilder(n_parallel=2), runner=runner,
                             measure_callbacks=[auto.RecordToFile(log)])
    task.tune(opt, search_policy=auto.SketchPolicy(task, seed=0, verbose=0))
    recs = list(auto.RecordReader(log))
    assert len(recs) == 2 and all(r.error_no == 0 and r.checked for _, r in recs)


def test_failure_costs_per_record_format(tmp_path):
    bad = error_result(MeasureErrorNo.COMPILE_HOST, "boom", 1.0, 2.0)
    task = create("test_measure_unified/add", (8,), "llvm")
    line = record.encode(AtvmInput(task.target, task, task.config_space.get(0)), bad)
    assert json.loads(line)["result"][0] == [AUTOTVM_ERROR_COST] == [1e9]
    st = auto.SearchTask(func=add, args=(8,), target="llvm")
    from templtune.auto_scheduler.measure_record import dump_record_to_string

    row = json.loads(dump_record_to_string(auto.MeasureInput(st, st.compute_dag.get_init_state()),
                                           bad))
    assert row["r"][0] == [AUTO_SCHEDULER_ERROR_COST] == [1e10]
    assert set(row) == {"i", "r", "v"}  # TVM's reader rejects other keys
