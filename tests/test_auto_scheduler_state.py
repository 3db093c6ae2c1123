"""auto_scheduler: loop state, transform steps, replay, Python printing and records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import auto_scheduler as auto
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG
from templtune.auto_scheduler.loop_state import ANN_PARALLEL, ANN_THREAD_X, INLINED, ITER, ROOT
from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
from templtune.auto_scheduler.measure_record import (
    dump_record_to_string,
    load_best_record,
    load_record_from_string,
)


def matmul(n: int, m: int, k: int, relu: bool = False) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    if relu:
        d = te.compute((n, m), lambda i, j: te.max(c[i, j], 0.0), name="D")
        return [a, b, d]
    return [a, b, c]


@auto.register_workload("test_as_matmul", override=True)
def _matmul_wl(n: int, m: int, k: int) -> list:
    return matmul(n, m, k)


def _run(dag: ComputeDAG, state, seed: int = 0) -> np.ndarray:
    sch, args = dag.apply_steps_from_state(state)
    mod = templtune.build(sch, args, target="llvm")
    rng = np.random.default_rng(seed)
    arrs = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
            for t in args]
    mod(*arrs)
    return arrs[-1]


def test_dag_print_flop_key() -> None:
    dag = ComputeDAG(matmul(512, 512, 512, relu=True))
    text = str(dag)
    assert "A = PLACEHOLDER [512, 512]" in text
    assert "C(i, j) += (A[i, k] * B[k, j])" in text
    assert dag.flop_ct == 2 * 512**3 + 512 * 512
    assert dag.workload_key() == ComputeDAG(matmul(512, 512, 512, relu=True)).workload_key()
    assert ComputeDAG(matmul(512, 512, 512)).flop_ct == 2 * 512**3


def test_flop_padding_and_attr() -> None:
    data = te.placeholder((1, 4, 8, 8), name="data")
    pad = topi.nn.pad(data, (0, 0, 1, 1), (0, 0, 1, 1))
    out = te.compute(pad.shape, lambda *i: pad(*i) * 2.0, name="out")
    assert ComputeDAG([data, out]).flop_ct == 1 * 4 * 10 * 10
    a = te.placeholder((16, 16), name="a")
    s = te.compute((16, 16), lambda i, j: te.if_then_else(a[i, j] > 0, a[i, j], 0.0), name="s")
    assert ComputeDAG([a, s]).flop_ct == 256


def test_duplicate_iter_names_rejected() -> None:
    a = te.placeholder((8, 8), name="a")
    b = te.compute((8, 8), lambda i, j: a[i, j] + 1.0, name="b")
    bad = te.compute((8, 8), lambda i, j: b[i, j] * 2.0, name="bad")
    object.__setattr__(bad.op.axis[1].var, "name", "i")
    with pytest.raises(ValueError, match="duplicate"):
        ComputeDAG([a, bad])


def test_split_extents() -> None:
    dag = ComputeDAG(matmul(512, 512, 512))
    s = dag.init_state
    s1 = s.split(2, 0, [8, 2])
    assert [it.range for it in s1.stages[2].iters[:3]] == [32, 8, 2]
    assert [it.name for it in s1.stages[2].iters[:3]] == ["i.0", "i.1", "i.2"]
    s2 = s.split(2, 0, [32, 8], inner_to_outer=False)
    assert [it.range for it in s2.stages[2].iters[:3]] == [32, 8, 2]
    s3 = s.split(2, 0, [16])
    assert [it.range for it in s3.stages[2].iters[:2]] == [32, 16]
    s4 = s.split(2, 0, [None])
    assert s4.stages[2].iters[0].range is None and not s4.concrete
    fused = s.split(2, 0, [64]).fuse(2, [1, 2])
    assert fused.stages[2].iters[1].range == 64 * 512
    assert fused.stages[2].iters[1].name == "i.1@j@"
    with pytest.raises(Exception, match="already annotated"):
        s.parallel(2, 0).parallel(2, 0)
    assert s.parallel(2, 0).stages[2].iters[0].annotation == ANN_PARALLEL
    assert s.bind(2, 1, "threadIdx.x").stages[2].iters[1].annotation == ANN_THREAD_X


def test_follow_split_levels() -> None:
    dag = ComputeDAG(matmul(512, 512, 512, relu=True))
    s = dag.init_state.split(2, 0, [4, 8, 2, 2])
    src = len(s.transform_steps) - 1
    for level in range(1, 5):
        t = s.follow_split(3, 0, src, level)
        ext = [it.range for it in t.stages[3].iters[:level + 1]]
        assert ext[:level] == [it.range for it in s.stages[2].iters[:level]]


def test_compute_at_inline_root_and_bounds() -> None:
    dag = ComputeDAG(matmul(64, 64, 64, relu=True))
    s = dag.init_state.split(3, 0, [8]).compute_at(2, 3, 0)
    assert s.stages[2].compute_at == ITER
    b = dag.infer_bound_from_state(s)
    assert [it.range for it in b.stages[2].iters] == [8, 64, 64]
    r = s.compute_root(2)
    assert r.stages[2].compute_at == ROOT
    assert [it.range for it in dag.infer_bound_from_state(r).stages[2].iters] == [64, 64, 64]
    c = te.placeholder((8, 8), name="c")
    d = te.compute((8, 8), lambda i, j: c[i, j] + 1.0, name="d")
    e = te.compute((8, 8), lambda i, j: d[i, j] * 2.0, name="e")
    dag2 = ComputeDAG([c, e])
    assert dag2.init_state.compute_inline(1).stages[1].compute_at == INLINED


def test_rfactor_iters() -> None:
    dag = ComputeDAG(matmul(8, 8, 512))
    s = dag.init_state.split(2, 2, [16])
    ko = s.rfactor(2, 2, 2)
    assert [st.op_name for st in ko.stages] == ["A", "B", "C.rf", "C.repl"]
    assert [it.range for it in ko.stages[2].iters] == [8, 8, 32, 16]
    assert [it.range for it in ko.stages[3].iters] == [8, 8, 32]
    ki = s.rfactor(2, 3, 2)
    assert [it.range for it in ki.stages[2].iters] == [8, 8, 16, 32]
    assert [it.range for it in ki.stages[3].iters] == [8, 8, 16]
    ref = _run(dag, dag.init_state)
    np.testing.assert_allclose(_run(dag, ko), ref, rtol=1e-4, atol=1e-4)


def test_cache_read_write_stage_order() -> None:
    dag = ComputeDAG(matmul(32, 32, 32))
    s = dag.init_state.cache_write(2, "local")
    assert [st.op_name for st in s.stages] == ["A", "B", "C.local", "C"]
    s = s.cache_read(0, "shared", [2])
    assert [st.op_name for st in s.stages] == ["A", "A.shared", "B", "C.local", "C"]
    s = s.compute_at(1, 3, 2).compute_at(3, 4, 1)
    ref = _run(dag, dag.init_state)
    np.testing.assert_allclose(_run(dag, s), ref, rtol=1e-4, atol=1e-4)


def _every_step_state(dag: ComputeDAG):
    s = dag.init_state.cache_write(2, "local")            # CHW
    s = s.split(2, 0, [4, 2]).split(2, 3, [4, 2])         # SP
    s = s.reorder(2, [0, 3, 1, 4, 2, 5, 6])               # RE
    src = len(s.transform_steps)
    s = s.split(3, 0, [4, 2])
    s = s.follow_split(3, 3, src, 2)                      # FSP
    s = s.follow_fused_split(3, 4, [src], 0, True)        # FFSP
    s = s.compute_at(2, 3, 1)                             # CA
    s = s.fuse(3, [0, 1])                                 # FU
    s = s.parallel(3, 0)                                  # AN
    s = s.pragma(2, 0, "auto_unroll_max_step$16")         # PR
    s = s.cache_read(0, "global", [2])                    # CHR
    s = s.compute_inline(1)                               # CI
    return s


def test_every_step_roundtrip_and_replay(tmp_path) -> None:
    task = auto.SearchTask(func="test_as_matmul", args=(32, 32, 32), target="llvm")
    dag = task.compute_dag
    s = _every_step_state(dag)
    kinds = {step.encode()[0] for step in s.transform_steps}
    assert kinds >= {"CHW", "SP", "RE", "FSP", "FFSP", "CA", "FU", "AN", "PR", "CHR", "CI"}
    res = MeasureResult((1e-3,), 0, "", 0.5, 1.0)
    line = dump_record_to_string(MeasureInput(task, s), res)
    inp, res2 = load_record_from_string(line)
    assert res2.costs == (1e-3,) and res2.error_no == 0
    assert inp.task.workload_key == task.workload_key
    replayed = dag.replay(inp.state.transform_steps)
    assert replayed == s
    assert dag.infer_bound_from_state(replayed) == dag.infer_bound_from_state(s)
    assert dag.infer_bound_from_state(s) != dag.infer_bound_from_state(dag.init_state)
    a = templtune.lower(*dag.apply_steps_from_state(s))
    b = templtune.lower(*dag.apply_steps_from_state(replayed))
    assert str(a) == str(b)
    np.testing.assert_allclose(_run(dag, s), _run(dag, dag.init_state), rtol=1e-4, atol=1e-4)
    # RF and CR too
    dag8 = ComputeDAG(matmul(8, 8, 64))
    t = dag8.init_state.split(2, 2, [8]).rfactor(2, 3, 2).compute_root(2)
    line = dump_record_to_string(MeasureInput(task, t), res)
    assert dag8.replay(load_record_from_string(line)[0].state.transform_steps) == t
    # file round trip and best record
    log = tmp_path / "sub" / "log.json"
    auto.save_records(str(log), [MeasureInput(task, s), MeasureInput(task, dag.init_state)],
                      [MeasureResult((2e-3,), 0, "", 1, 1), MeasureResult((1e-3,), 0, "", 1, 1)])
    inp, res = load_best_record(str(log), task.workload_key, "llvm")
    assert inp.state.transform_steps == () and res.costs == (1e-3,)


def test_record_v01_and_comments(tmp_path) -> None:
    line = ('{"i": [["[\\"test_as_matmul\\", 32, 32, 32]", "llvm"], [[], [["SP", 2, 0, 32, '
            '[4], 1]]]], "r": [[0.5], 0, 1.0, 1585564852], "v": "v0.1"}')
    inp, res = load_record_from_string(line)
    assert inp.task.target == "llvm" and inp.state.transform_steps[0].lengths == (4,)
    f = tmp_path / "log.json"
    f.write_text("# comment\n" + line + "\n{broken\n")
    assert len(list(auto.RecordReader(str(f)))) == 1


def test_python_code_executes() -> None:
    tensors = matmul(32, 32, 32)
    dag = ComputeDAG(tensors)
    s = _every_step_state(dag)
    code = dag.print_python_code_from_state(s)
    assert "s[C_local].compute_at(s[C]" in code and ".parallel(" in code
    sch = te.create_schedule(tensors[-1].op)
    ns = {"s": sch, "te": te, "A": tensors[0], "B": tensors[1], "C": tensors[2]}
    exec(code, ns)  # noqa: S102 - generated schedule code under test
    mod = templtune.build(sch, tensors, target="llvm")
    rng = np.random.default_rng(0)
    arrs = [rng.uniform(-1, 1, (32, 32)).astype("float32") for _ in range(3)]
    mod(*arrs)
    np.testing.assert_allclose(arrs[2], arrs[0] @ arrs[1], rtol=1e-4, atol=1e-4)


def test_workload_key_and_registry() -> None:
    key = auto.make_workload_key("test_as_matmul", (8, 8, 8))
    assert key == '["test_as_matmul", 8, 8, 8]'
    assert auto.decode_workload_key(key) == ("test_as_matmul", (8, 8, 8))
    assert auto.decode_workload_key("nokey") == ("nokey", None)
    assert len(auto.workload_key_to_tensors(key)) == 3
    with pytest.raises(ValueError, match="already registered"):
        auto.register_workload("test_as_matmul", _matmul_wl)


def test_task_pickle_reregisters() -> None:
    import pickle

    dag = ComputeDAG(matmul(16, 16, 16))
    task = auto.SearchTask(compute_dag=dag, target="llvm")
    from templtune.auto_scheduler.workload_registry import WORKLOAD_FUNC_REGISTRY

    WORKLOAD_FUNC_REGISTRY.pop(task.workload_key)
    t2 = pickle.loads(pickle.dumps(task))
    assert t2.workload_key in WORKLOAD_FUNC_REGISTRY
    assert str(t2.compute_dag) == str(dag)



@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**20))
def test_property_sampled_states_roundtrip(seed: int) -> None:
    from templtune.auto_scheduler import SketchPolicy

    task = auto.SearchTask(func="test_as_matmul", args=(16, 24, 32), target="llvm")
    pol = SketchPolicy(task, seed=seed, verbose=0)
    for s in pol.sample_initial_population(3):
        line = dump_record_to_string(MeasureInput(task, s), MeasureResult((1.0,), 0, "", 0, 0))
        inp, _ = load_record_from_string(line)
        again = task.compute_dag.replay(inp.state.transform_steps)
        assert again == s
        assert dump_record_to_string(MeasureInput(task, again),
                                     MeasureResult((1.0,), 0, "", 0, 0)) == line


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.sampled_from([1, 2, 4, 8, 16]), j=st.sampled_from([1, 2, 4, 8]),
       k=st.sampled_from([1, 2, 4, 8, 16]), order=st.permutations([0, 1, 2, 3, 4, 5]))
def test_property_random_tiles_match_numpy(i: int, j: int, k: int, order: list[int]) -> None:
    dag = ComputeDAG(matmul(16, 8, 16))
    s = dag.init_state.split(2, 2, [k]).split(2, 1, [j]).split(2, 0, [i])
    s = s.reorder(2, order)
    a = _run(dag, s)
    b = _run(dag, dag.init_state)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
