"""Hostile auto-scheduler log lines, written to real files: no line makes a log unreadable, no
line wins best selection, and no line puts code into a printed schedule (issue 16 items 5, 6,
8, 9 and 11).

Each kind in :func:`hostile` is a list of raw lines that would win if believed (cost 1e-9); the
tests put them before three good records.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler as auto
from templtune import te
from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
from templtune.auto_scheduler.measure_record import (
    dump_record_to_string,
    load_best_record,
    save_records,
)
from templtune.cli.main import main
from templtune.errors import ScheduleError

KEY_ARGS = (32, 32, 32)
BEST = 1e-3


def matmul(n: int, m: int, k: int) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return [a, b, c]


auto.register_workload("test_faults_as_matmul", override=True)(matmul)


@pytest.fixture(scope="module")
def task():
    return auto.SearchTask(func="test_faults_as_matmul", args=KEY_ARGS, target="llvm")


def _best_state(dag):
    s = dag.init_state.cache_write(2, "local")
    s = s.split(2, 0, [4, 2]).split(2, 3, [4, 2])
    s = s.pragma(2, 0, "auto_unroll_max_step$16")
    return s.cache_read(0, "global", [2])


def _good_lines(task) -> list[bytes]:
    dag = task.compute_dag
    states = [(dag.init_state, 5e-3), (_best_state(dag), BEST),
              (dag.init_state.split(2, 0, [8]), 4e-3)]
    return [(dump_record_to_string(MeasureInput(task, s), MeasureResult((c,), 0, "", 0.1, 1))
             + "\n").encode() for s, c in states]


def _mutate(base: bytes, costs=None, error_no=None, step=None, step_field=None) -> bytes:
    obj = json.loads(base)
    obj["r"][0] = [1e-9] if costs is None else costs
    if error_no is not None:
        obj["r"][1] = error_no
    if step is not None:
        obj["i"][1][1] = [step] if step_field is None else obj["i"][1][1]
    if step_field is not None:  # (step type, field index, value) on the first such step
        kind, k, value = step_field
        first = next(st for st in obj["i"][1][1] if st[0] == kind)
        first[k] = value
    text = json.dumps(obj)
    for token, raw in (('"__NAN__"', "NaN"), ('"__INF__"', "Infinity"),
                       ('"__BIGINT__"', "1" + "0" * 400)):
        text = text.replace(token, raw)
    return (text + "\n").encode()


PROBE = "templtune_injected_probe"


def _inject(probe: Path) -> str:
    return f'auto_unroll_max_step", 0); open({str(probe)!r}, "w").close(); ("'


def hostile(base: bytes, probe: Path) -> dict[str, list[bytes]]:
    """The hostile kinds, from the best good line ``base`` (which has CHW, SP, PR, CHR)."""
    tvm_line = (b'{"input": ["llvm", "x", [1], {}], "config": {"index": 0, "code_hash": null, '
                b'"entity": []}, "result": [[1e-9], 0, 0.1, 1], "version": 0.2}\n')
    code = f"__import__('os').system('touch {probe}')"
    return {
        "non_utf8_bytes": [base.replace(b"test_faults_as_matmul", b"test_\xff\xfeas"),
                           b"\xff\xfe" + base],
        "int_cost_401_digits": [_mutate(base, costs=["__BIGINT__"])],
        "nesting_200k": [b"[" * 200_000 + b"\n", b'{"i": ' + b"[" * 200_000 + b"\n"],
        "nested_workload_key": [base.replace(b'"[\\"test_faults_as_matmul\\"',
                                             b'"' + b"[" * 100_000 + b'\\"x\\"')],
        "nan_cost": [_mutate(base, costs=["__NAN__"])],
        "infinite_cost": [_mutate(base, costs=["__INF__"])],
        "negative_cost": [_mutate(base, costs=[-1e-3])],
        "zero_cost": [_mutate(base, costs=[0])],
        "no_costs": [_mutate(base, costs=[])],
        "string_cost": [_mutate(base, costs=["1e-9"])],
        "bool_cost": [_mutate(base, costs=[True])],
        "string_error_no": [_mutate(base, error_no="0")],
        "float_error_no": [_mutate(base, error_no=0.5)],
        "bool_error_no": [_mutate(base, error_no=False)],
        "not_an_object": [b"5\n", b"[1, 2]\n", b"null\n"],
        "other_format_record": [tvm_line],
        "pragma_code_injection": [_mutate(base, step_field=("PR", 3, _inject(probe)))],
        "unknown_pragma": [_mutate(base, step_field=("PR", 3, "debug_anything$1"))],
        "scope_code_injection": [_mutate(base, step_field=("CHW", 2, f'local"); {code}; ("')),
                                 _mutate(base, step_field=("CHR", 2, f'global", {code}, "'))],
        "split_length_code": [_mutate(base, step_field=("SP", 4, [code]))],
        "unknown_step": [_mutate(base, step=["XX", 2, 0])],
        "split_of_another_shape": [_mutate(base, step_field=("SP", 3, 64))],
        "split_beyond_extent": [_mutate(base, step_field=("SP", 4, [64, 64]))],
        "stage_out_of_range": [_mutate(base, step=["SP", 9, 0, 32, [4], 1])],
    }


_SHAPE = (b'{"i": [["k", "llvm"], [[], [["CHW", 2, "local"], ["SP", 2, 0, 32, [4], 1], '
          b'["PR", 2, 0, "auto_unroll_max_step$16"], ["CHR", 0, "global", [2]]]]], '
          b'"r": [[1], 0, 0, 0]}')
KINDS = sorted(hostile(_SHAPE, Path("p")))


def _check(path: Path, task, tmp_path: Path, probe: Path) -> None:
    dag, key = task.compute_dag, task.workload_key
    best_steps = _best_state(dag).transform_steps
    recs = list(auto.RecordReader(str(path)))
    assert {r.costs for _, r in recs} >= {(5e-3,), (BEST,), (4e-3,)}
    inp, res = load_best_record(str(path), key, "llvm", dag=dag)
    assert res.costs == (BEST,) and inp.state.transform_steps == best_steps
    state = auto.ApplyHistoryBest(str(path)).query("llvm", key, dag=dag)
    assert state.transform_steps == best_steps
    out = tmp_path / "best.json"
    assert main(["log", "pick", str(path), "-o", str(out)]) == 0
    picked = [r.costs for i, r in auto.RecordReader(str(out)) if i.task.workload_key == key]
    assert picked == [(BEST,)]
    # the printed best schedule, executed, builds the real best and runs no logged text
    code = task.print_best(str(path))
    sch = te.create_schedule(dag.tensors[-1].op)
    ns = {"s": sch, "te": te, "A": dag.tensors[0], "B": dag.tensors[1], "C": dag.tensors[2]}
    exec(code, ns)  # noqa: S102 - generated schedule code under test
    assert not probe.exists()
    mod = templtune.build(sch, list(dag.tensors), target="llvm")
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (32, 32)).astype("float32") for _ in range(2))
    c = np.zeros((32, 32), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_line_neither_breaks_nor_poisons(kind, task, tmp_path):
    probe = tmp_path / PROBE
    good = _good_lines(task)
    path = tmp_path / "as.json"
    path.write_bytes(b"".join(hostile(good[1], probe)[kind] + good))
    _check(path, task, tmp_path, probe)


def test_all_kinds_in_one_log(task, tmp_path):
    probe = tmp_path / PROBE
    good = _good_lines(task)
    lines = [ln for k in KINDS for ln in hostile(good[1], probe)[k]]
    path = tmp_path / "as.json"
    path.write_bytes(b"".join(x for pair in zip(lines, good * len(lines)) for x in pair))
    _check(path, task, tmp_path, probe)


@pytest.mark.parametrize("prefix", [b" ", b"\t  ", b"\xef\xbb\xbf"])
def test_leading_whitespace_and_bom_are_tolerated(prefix, task, tmp_path):
    good = _good_lines(task)
    path = tmp_path / "as.json"
    path.write_bytes(prefix + good[1] + good[0] + good[2])
    assert len(list(auto.RecordReader(str(path)))) == 3
    inp, res = load_best_record(str(path), task.workload_key, "llvm")
    assert res.costs == (BEST,)


def test_append_after_a_torn_last_line(task, tmp_path):
    good = _good_lines(task)
    path = tmp_path / "as.json"
    path.write_bytes(good[0] + good[2][:60])
    inputs, results = auto.RecordReader(str(path)).read_lines()
    save_records(str(path), [MeasureInput(task, _best_state(task.compute_dag))],
                 [MeasureResult((BEST,), 0, "", 0.1, 1)])
    reader = auto.RecordReader(str(path))
    assert [r.costs for _, r in reader] == [(5e-3,), (BEST,)]
    assert reader.skipped == [2]


def test_decoding_rejects_unknown_names_clearly():
    from templtune.auto_scheduler.transform_step import decode_step

    with pytest.raises(ScheduleError, match="unknown pragma 'x'"):
        decode_step(["PR", 2, 0, "x$1"])
    with pytest.raises(ScheduleError, match="unknown cache scope 'texture'"):
        decode_step(["CHW", 2, "texture"])
    with pytest.raises(ValueError, match="must be integers"):
        decode_step(["SP", 2, 0, 32, ["4"], 1])


def test_resume_paths_ignore_hostile_records(task, tmp_path):
    """Preloading measured states, restoring the task scheduler and training the cost model
    from a hostile log: no crash (1 / 0 cost), no nonsense best, finite training labels."""
    good = _good_lines(task)
    lines = [ln for k in KINDS for ln in hostile(good[1], tmp_path / PROBE)[k]]
    path = tmp_path / "as.json"
    path.write_bytes(b"".join(lines + good))
    pol = auto.SketchPolicy(task, seed=0)
    auto.PreloadMeasuredStates(str(path))(pol)
    assert sorted(pol.measured_throughputs) == sorted(1 / c for c in (5e-3, BEST, 4e-3))
    ts = auto.TaskScheduler([task], load_log_file=str(path))
    ts.early_stopping_task = 10**9  # set by tune() before it restores
    ts._restore_status(str(path), 4)
    assert ts.best_costs[0] == BEST
    model = auto.XGBModel(seed=0)
    model.update_from_file(str(path))
    scores = model.predict(task, [task.compute_dag.init_state])
    assert np.all(np.isfinite(scores))
