"""AutoTVM JSON-lines records: encode/decode, tolerant loading, append, pick_best, split
(SPEC §4.1, §4.2, §7 facts 13-15)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune import autotvm, te
from templtune.autotvm import record
from templtune.autotvm.history import ApplyHistoryBest
from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from templtune.autotvm.space import ConfigEntity
from templtune.target import Target


@autotvm.template("test_record/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", s[C].op.axis[0], num_outputs=2)
    cfg.define_split("tile_x", s[C].op.axis[1], num_outputs=2)
    cfg.define_knob("unroll", [0, 16])
    return s, [A, B, C]


def _task(n=16, target="llvm"):
    return autotvm.task.create("test_record/matmul", (n, n, n, "float32"), target)


def _rec(task, index, cost, error=0, ts=1.0, target=None):
    inp = MeasureInput(task.target if target is None else Target(target), task,
                       task.config_space.get(index))
    res = MeasureResult((cost,), error, 0.5, ts, "boom" if error else "")
    return inp, res


def test_encode_schema():
    task = _task()
    line = record.encode(*_rec(task, 9, 0.0012))
    obj = json.loads(line)
    assert list(obj) == ["input", "config", "result", "version", "tvm_version"]
    assert obj["input"] == ["llvm", "test_record/matmul", [16, 16, 16, "float32"], {}]
    assert obj["config"]["index"] == 9 and obj["config"]["code_hash"] is None
    assert obj["config"]["entity"][0] == ["tile_y", "sp", [-1, 16]]  # 9 % 5 = 4
    assert obj["result"] == [[0.0012], 0, 0.5, 1.0] and obj["version"] == 0.2
    err = json.loads(record.encode(*_rec(task, 9, 0.3, error=MeasureErrorNo.RUNTIME_DEVICE)))
    assert err["result"][:2] == [[1e9], 4] and err["error_detail"] == "boom"


def test_tensor_args_encoding():
    @autotvm.template("test_record/tensor", override=True)
    def tmpl(A):
        B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
        autotvm.get_config().define_knob("k", [0])
        return te.create_schedule(B.op), [A, B]

    task = autotvm.task.create("test_record/tensor", (te.placeholder((8,), dtype="float16"),),
                               "llvm")
    line = record.encode(*_rec(task, 0, 1.0))
    assert json.loads(line)["input"][2] == [["TENSOR", [8], "float16"]]
    inp, _ = record.decode(line)
    assert inp.task.workload == task.workload


def test_decode_round_trip():
    task = _task()
    for error in (0, 2):
        inp, res = _rec(task, 37, 0.25, error=error, ts=123.5)
        inp2, res2 = record.decode(record.encode(inp, res))
        assert record.measure_str_key(inp2) == record.measure_str_key(inp)
        assert inp2.task.workload == task.workload and inp2.config == inp.config
        assert res2.error_no == error and res2.timestamp == 123.5
        assert res2.costs == ((0.25,) if error == 0 else (1e9,))
        assert inp2.config.cost == res2.costs[0]
        s, args = task.instantiate(inp2.config)
        assert len(args) == 3


def test_decode_old_and_renamed_target():
    assert record.decode(json.dumps({"v": 0.1, "i": []})) is None
    task = _task()
    obj = json.loads(record.encode(*_rec(task, 1, 1.0)))
    obj["input"][0] = "llvm -target=x86_64-linux-gnu"
    inp, _ = record.decode(json.dumps(obj))
    assert "-mtriple=x86_64-linux-gnu" in str(inp.target)


def test_load_skips_blank_comment_corrupt_and_truncated(tmp_path, caplog):
    task = _task()
    good = [record.encode(*_rec(task, i, 0.1 * (i + 1))) for i in range(3)]
    path = tmp_path / "t.log"
    path.write_text("# comment\n" + good[0] + "\n\n{not json\n" + good[1] + "\n"
                    + '{"input": [1]}\n' + good[2] + "\n" + good[2][:40])
    with caplog.at_level(logging.WARNING, logger="autotvm.record"):
        recs = list(record.load_from_file(path))
    assert [inp.config.index for inp, _ in recs] == [0, 1, 2]
    msgs = [r.getMessage() for r in caplog.records]
    assert any(f"{path}:4: skipping corrupt" in m for m in msgs)
    assert any(f"{path}:6: skipping corrupt" in m for m in msgs)
    assert any(f"{path}:8: skipping truncated" in m for m in msgs)
    assert len(msgs) == 3


def test_log_to_file_style_round_trip_and_best(tmp_path):
    task = _task()
    path = tmp_path / "x.log"
    # costs from 1 s: a zero cost is nonsense that best selection refuses
    pairs = [_rec(task, i, float(i + 1)) for i in range(10)]
    assert record.append_records(path, pairs[:4]) == 4
    record.append_records(str(path), pairs[4:])
    empty = MeasureInput(task.target, task, ConfigEntity(0, None, {}, []))
    with open(path, "a") as f:
        record.append_records(f, [(empty, MeasureResult((5.0,), 0, 0.0, 0.0))])
    loaded = list(record.load_from_file(path))
    assert len(loaded) == 11
    assert [r.costs for _, r in loaded[:10]] == [(float(i + 1),) for i in range(10)]
    assert loaded[10][0].config.to_json_dict()["entity"] == []
    ctx = ApplyHistoryBest([path, path])
    assert ctx.query(Target("llvm"), task.workload).index == 0


@pytest.mark.parametrize("kind", ["path", "str", "stringio", "list", "zip"])
def test_best_from_many_sources(tmp_path, kind):
    task = _task()
    pairs = [_rec(task, 0, 1.0), _rec(task, 1, 2.0), _rec(task, 2, 0.5)]
    path = tmp_path / "b.log"
    record.save_to_file(pairs, path)
    src = {"path": path, "str": str(path),
           "stringio": io.StringIO(path.read_text()),
           "list": pairs, "zip": zip(*zip(*pairs))}[kind]
    assert ApplyHistoryBest(src).query("llvm", task.workload).index == 2


def test_best_split_across_files(tmp_path):
    task = _task()
    f1, f2 = tmp_path / "1.log", tmp_path / "2.log"
    record.save_to_file([_rec(task, 0, 1.0), _rec(task, 1, 2.0)], f1)
    record.save_to_file([_rec(task, 2, 0.5), _rec(task, 3, 3.0)], f2)
    for src in ([f1, f2], zip([str(f1), str(f2)]), [[f1], [[f2]]]):
        assert ApplyHistoryBest(src).query("llvm", task.workload).index == 2


def test_pick_best(tmp_path):
    t16, t32 = _task(16), _task(32)
    recs = [_rec(t16, 0, 3.0), _rec(t16, 1, 1.0), _rec(t16, 2, 1.0), _rec(t32, 0, 9.0),
            _rec(t32, 3, 0.1, error=1), _rec(t16, 5, 0.5, target="cuda")]
    src, out = tmp_path / "in.log", tmp_path / "best.log"
    record.save_to_file(recs, src)
    assert record.pick_best(src, out) == 3
    got = [(inp.task.args[0], str(inp.target), inp.config.index)
           for inp, _ in record.load_from_file(out)]
    assert got == [(16, "llvm", 1), (32, "llvm", 0), (16, "cuda", 5)]  # tie keeps the first
    # out_file is merged in when it exists: a better new record replaces the old best
    record.save_to_file([_rec(t16, 7, 0.01)], src)
    record.pick_best(src, out)
    got = {(inp.task.args[0], str(inp.target)): inp.config.index
           for inp, _ in record.load_from_file(out)}
    assert got == {(16, "llvm"): 7, (32, "llvm"): 0, (16, "cuda"): 5}
    assert record.pick_best(src) == 1 and Path(f"{src}.best.log").exists()


def test_split_workload(tmp_path):
    t16, t32 = _task(16), _task(32)
    recs = [_rec(t16, 0, 1.0), _rec(t32, 0, 2.0), _rec(t16, 0, 1.5), _rec(t16, 1, 1.0)]
    src = tmp_path / "s.log"
    record.save_to_file(recs, src)
    out = record.split_workload(src, out_dir=tmp_path / "parts")
    assert [(p.name, n) for p, n in out] == [("s.log.000.wkl", 2), ("s.log.001.wkl", 1)]
    out = record.split_workload(src, clean=False)
    assert [n for _, n in out] == [3, 1] and out[0][0].parent == tmp_path


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, 5 * 5 * 2 - 1), cost=st.floats(1e-9, 1e3),
       err=st.sampled_from(list(MeasureErrorNo)), ts=st.floats(0, 2e9),
       all_cost=st.floats(0, 1e4), target=st.sampled_from(["llvm", "cuda", "llvm -mcpu=znver4"]))
def test_record_round_trip_property(index, cost, err, ts, all_cost, target):
    task = _task()
    inp = MeasureInput(Target(target), task, task.config_space.get(index))
    res = MeasureResult((cost, cost * 2), err, all_cost, ts, "detail" if err else "")
    line = record.encode(inp, res)
    assert "\n" not in line
    inp2, res2 = record.decode(line)
    assert record.measure_str_key(inp2) == record.measure_str_key(inp)
    assert inp2.config == inp.config and res2.error_no == err
    assert (res2.all_cost, res2.timestamp) == (all_cost, ts)
    assert res2.costs == ((cost, cost * 2) if err == 0 else (1e9,))
    assert record.encode(inp2, res2) == line
