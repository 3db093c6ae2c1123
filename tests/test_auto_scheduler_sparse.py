"""The auto-scheduler on block-sparse dense: sparse tasks carry their BSR arrays as task
inputs, sparse_sketch_rules tile them, and a tuned network builds and matches numpy (TVM's
tune_network_x86 with use_sparse=True)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler, relay
from templtune.auto_scheduler import get_task_input_buffer
from templtune.graph.reference import evaluate
from templtune.topi.sparse.utils import convert_model_dense_to_sparse, sparse_sketch_rules


def _net():
    rng = np.random.default_rng(0)
    x = relay.var("data", (4, 32))
    w = relay.var("w", (16, 32))
    b = relay.var("b", (16,))
    func = relay.Function([x, w, b], relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w), b)))
    params = {"w": rng.standard_normal((16, 32)).astype("float32"),
              "b": rng.standard_normal(16).astype("float32")}
    return convert_model_dense_to_sparse(func, params, bs_r=4, random_params=True)


def test_sparse_task_inputs_are_the_network_arrays():
    smod, sparams = _net()
    tasks, _ = auto_scheduler.extract_tasks(smod, sparams, "llvm")
    assert len(tasks) == 1
    task = tasks[0]
    assert set(task.task_input_names) == {"p1", "p2", "p3"}
    for ph, name in (("p1", "w.data"), ("p2", "w.indices"), ("p3", "w.indptr")):
        np.testing.assert_array_equal(get_task_input_buffer(task.workload_key, ph),
                                      sparams[name])


def test_sparse_task_without_params_is_refused():
    smod, _ = _net()
    with pytest.raises(templtune.errors.TempltuneError, match="w.indices|w.data"):
        auto_scheduler.extract_tasks(smod, None, "llvm")


def test_sparse_sketch_rules_tile_without_rfactor():
    smod, sparams = _net()
    task = auto_scheduler.extract_tasks(smod, sparams, "llvm")[0][0]
    policy = auto_scheduler.SketchPolicy(task, program_cost_model=auto_scheduler.RandomModel(),
                                         init_search_callbacks=sparse_sketch_rules(), verbose=0)
    sketches = policy.generate_sketches()
    assert len(sketches) == 3                    # unfused, consumer fused at levels 1 and 2
    for s in sketches:
        names = [st.op_name for st in s.stages]
        assert not any(n.endswith(".rf") for n in names)
        sparse = s.stages[names.index("T_sparse_dense")]
        assert sum(it.name.startswith(("i.", "j.")) for it in sparse.iters) == 8  # SSRSRS
    assert len({str(s) for s in sketches}) == 3


def test_sparse_sketch_rules_replace_rfactor():
    # a long guarded reduction over few outputs: the built-in rules would factor it
    from templtune.relay import data_dep_optimization as ddo
    from templtune.topi.sparse.utils import random_bsr_matrix

    rng = np.random.default_rng(1)
    x = relay.var("data", (1, 1024))
    w = relay.var("w", (4, 1024))
    dense_w = random_bsr_matrix(4, 1024, 4, 1, 0.3, "float32", rng=rng).todense()
    smod, sparams = ddo.bsr_dense.convert(relay.Function([x, w], relay.nn.dense(x, w)),
                                          {"w": dense_w}, (4, 1), sparsity_threshold=0.5)
    task = auto_scheduler.extract_tasks(smod, sparams, "llvm")[0][0]

    def stages(callbacks):
        policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(), verbose=0,
                                             init_search_callbacks=callbacks)
        return [[st.op_name for st in s.stages] for s in policy.generate_sketches()]

    assert any("T_sparse_dense.rf" in names for names in stages([]))
    assert stages(sparse_sketch_rules()) == [["p3", "p1", "p2", "p0", "T_sparse_dense"]]


def test_one_policy_per_task_is_checked():
    smod, sparams = _net()
    tasks, weights = auto_scheduler.extract_tasks(smod, sparams, "llvm")
    tuner = auto_scheduler.TaskScheduler(tasks, weights)
    opt = auto_scheduler.TuningOptions(num_measure_trials=2)
    with pytest.raises(ValueError, match="one SketchPolicy per task"):
        tuner.tune(opt, search_policy=[object()])


@pytest.mark.slow
def test_tune_sparse_network_then_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                  # the task scheduler writes its tsv here
    smod, sparams = _net()
    tasks, weights = auto_scheduler.extract_tasks(smod, sparams, "llvm")
    log = os.fspath(tmp_path / "sparse.json")
    policies = [auto_scheduler.SketchPolicy(t, program_cost_model=auto_scheduler.XGBModel(),
                                            init_search_callbacks=sparse_sketch_rules())
                for t in tasks]
    tuner = auto_scheduler.TaskScheduler(tasks, weights)
    opt = auto_scheduler.TuningOptions(
        num_measure_trials=4, runner=auto_scheduler.LocalRunner(timeout=60),
        measure_callbacks=[auto_scheduler.RecordToFile(log)], verbose=0)
    tuner.tune(opt, search_policy=policies)
    with auto_scheduler.ApplyHistoryBest(log):
        with templtune.transform.PassContext(
                opt_level=3, config={"relay.backend.use_auto_scheduler": True}):
            lib = relay.build(smod, target="llvm", params=sparams)
    assert lib.num_tuned == 1
    m = relay.GraphModule(lib["default"](templtune.cpu()))
    x = np.random.default_rng(5).standard_normal((4, 32)).astype("float32")
    m.set_input("data", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), evaluate(smod, sparams, data=x),
                               rtol=1e-4, atol=1e-5)
