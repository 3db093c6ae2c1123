"""Hostile AutoTVM log lines, written to real files: no line makes a log unreadable, and no
line wins best selection (issue 16 items 5-8 and 10; issue 19's wrong-format message).

Each kind in :data:`HOSTILE` is a list of raw lines (bytes) that would win if it were believed
(cost 1e-9 where a cost is given). Every test puts them *before* six good records, so a poisoned
first record (a NaN cost that is never replaced) would show.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from templtune import autotvm, te
from templtune.autotvm import record
from templtune.autotvm.history import ApplyHistoryBest
from templtune.autotvm.measure import MeasureInput, MeasureResult, measure_option
from templtune.cli.main import main
from templtune.measure.fake import FakeBuilder, FakeRunner
from templtune.target import Target

ROOT = Path(__file__).resolve().parents[2]
NAME = "test_faults/vadd"
BEST_INDEX, BEST_COST = 2, 1e-3


@autotvm.template(NAME)
def vadd(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    cfg = autotvm.get_config()
    cfg.define_split("tile", s[B].op.axis[0], num_outputs=2)
    cfg.define_knob("unroll", [0, 1])
    _, xi = cfg["tile"].apply(s, B, s[B].op.axis[0])
    if cfg["unroll"].val:
        s[B].unroll(xi)
    return s, [A, B]


def _task(target: str = "llvm"):
    return autotvm.task.create(NAME, (64,), target)


def _good_lines(task) -> list[bytes]:
    costs = {0: 5e-3, 1: 4e-3, BEST_INDEX: BEST_COST, 3: 6e-3, 4: 2e-3, 5: 7e-3}
    return [(record.encode(MeasureInput(task.target, task, task.config_space.get(i)),
                           MeasureResult((c,), 0, 0.1, 1.7e9 + i)) + "\n").encode()
            for i, c in costs.items()]


def _mutate(base: bytes, **kw) -> bytes:
    obj = json.loads(base)
    obj["result"][0] = [1e-9]
    for k, v in kw.items():
        if k == "costs":
            obj["result"][0] = v
        elif k == "error_no":
            obj["result"][1] = v
        elif k == "timestamp":
            obj["result"][3] = v
        elif k == "entity":
            obj["config"]["entity"] = v
        elif k == "args":
            obj["input"][2] = v
    text = json.dumps(obj)
    for token, raw in (('"__NAN__"', "NaN"), ('"__INF__"', "Infinity"),
                       ('"__BIGINT__"', "1" + "0" * 400)):
        text = text.replace(token, raw)
    return (text + "\n").encode()


def hostile(base: bytes) -> dict[str, list[bytes]]:
    """The hostile line kinds, built from a good record line ``base``."""
    as_line = (b'{"i": [["[\\"x\\", 1]", "llvm", [], "", 0, []], [[], []]], '
               b'"r": [[1e-9], 0, 0.1, 1], "v": "v0.6"}\n')
    return {
        "int_cost_401_digits": [_mutate(base, costs=["__BIGINT__"])],
        "nesting_200k": [b"[" * 200_000 + b"\n",
                         b'{"input": ' + b"[" * 200_000 + b"\n"],
        "non_utf8_bytes": [base.replace(b'"llvm"', b'"llvm\xff\xfe"'),
                           b"\xff" + base],
        "string_cost": [_mutate(base, costs=["1e-9"])],
        "bool_cost": [_mutate(base, costs=[True])],
        "string_error_no": [_mutate(base, error_no="0")],
        "float_error_no": [_mutate(base, error_no=0.5)],
        "bool_error_no": [_mutate(base, error_no=False)],
        "overflowing_timestamp": [_mutate(base, timestamp="__BIGINT__"),
                                  _mutate(base, timestamp="__INF__")],
        "not_an_object": [b"5\n", b"[1, 2]\n", b'"text"\n', b"null\n"],
        "unhashable_args": [_mutate(base, args=[64, {"a": 1}]), _mutate(base, args=[{}])],
        "other_format_record": [as_line],
        "nan_cost": [_mutate(base, costs=["__NAN__"])],
        "infinite_cost": [_mutate(base, costs=["__INF__"])],
        "negative_cost": [_mutate(base, costs=[-1e-3])],
        "zero_cost": [_mutate(base, costs=[0.0])],
        "no_costs": [_mutate(base, costs=[])],
        "missing_knobs": [_mutate(base, entity=[]),
                          _mutate(base, entity=[["tile", "sp", [-1, 8]]])],
        "split_not_the_extent": [_mutate(base, entity=[["tile", "sp", [-1, 3]],
                                                       ["unroll", "ot", 0]]),
                                 _mutate(base, entity=[["tile", "sp", [2, 16]],
                                                       ["unroll", "ot", 0]])],
        "knob_out_of_range": [_mutate(base, entity=[["tile", "sp", [-1, 8]],
                                                    ["unroll", "ot", 7]])],
        "wrong_knob_kind": [_mutate(base, entity=[["tile", "ot", 8], ["unroll", "ot", 0]])],
    }


KINDS = sorted(hostile(b'{"input": ["llvm", "x", [1], {}], "config": {"index": 0, "code_hash": '
                       b'null, "entity": []}, "result": [[1], 0, 0, 0], "version": 0.2}'))


@pytest.fixture(scope="module")
def task():
    return _task()


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def _assert_clean_best(path: Path, task, tmp_path: Path) -> None:
    good = {i for i in range(6)}
    loaded = list(record.load_from_file(path))
    assert good <= {inp.config.index for inp, res in loaded if res.costs and res.costs[0] >= 1e-3}
    with ApplyHistoryBest(path) as ctx, Target("llvm"):
        cfg = ctx.query(Target("llvm"), task.workload)
        assert cfg.index == BEST_INDEX
        assert record.check_config(task.config_space, cfg) is None
        vadd(64)  # the user's template call gets the same config and builds
    out = tmp_path / "picked.log"
    assert record.pick_best(path, out) == 1
    [(inp, res)] = list(record.load_from_file(out))
    assert (inp.config.index, res.costs) == (BEST_INDEX, (BEST_COST,))


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_line_neither_breaks_nor_poisons(kind, task, tmp_path, capsys):
    good = _good_lines(task)
    path = _write(tmp_path / "tune.log", hostile(good[0])[kind] + good)
    _assert_clean_best(path, task, tmp_path)
    assert main(["best", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"config #{BEST_INDEX}" in out and "1.0000 ms" in out
    assert main(["log", "read", str(path)]) == 0
    assert "best 1.0000 ms" in capsys.readouterr().out
    assert main(["log", "split", str(path), "--out-dir", str(tmp_path / "parts")]) == 0


def test_all_kinds_in_one_log(task, tmp_path, capsys):
    """Every hostile line of every kind, interleaved with the good records, in one file."""
    good = _good_lines(task)
    lines = [ln for k in KINDS for ln in hostile(good[0])[k]]
    mixed = [x for pair in zip(lines, good * len(lines)) for x in pair]
    path = _write(tmp_path / "tune.log", mixed)
    _assert_clean_best(path, task, tmp_path)
    assert main(["best", str(path)]) == 0
    assert f"config #{BEST_INDEX}" in capsys.readouterr().out


def test_bom_and_torn_last_line_then_append(task, tmp_path):
    good = _good_lines(task)
    path = _write(tmp_path / "tune.log", [b"\xef\xbb\xbf" + good[0], good[1][:50]])
    rec = list(record.load_from_file(_write(tmp_path / "g.log", good)))
    record.append_records(path, rec[1:])
    indices = [inp.config.index for inp, _ in record.load_from_file(path)]
    assert indices == [0, 1, 2, 3, 4, 5]  # the BOM record and every appended one


def test_log_to_file_callback_ends_a_torn_line(task, tmp_path):
    good = _good_lines(task)
    path = _write(tmp_path / "tune.log", [good[0], good[1][:50]])
    tuner = autotvm.tuner.RandomTuner(task, seed=0)
    tuner.tune(3, measure_option(FakeBuilder(n_parallel=1), FakeRunner(seed=0)),
               callbacks=[autotvm.callback.log_to_file(str(path))])
    assert len(list(record.load_from_file(path))) == 1 + 3


def test_resume_matches_the_target(tmp_path):
    """Records of ``llvm`` are not measurements of ``llvm -mcpu=haswell``."""
    plain, haswell = _task("llvm"), _task("llvm -mcpu=haswell")
    log = tmp_path / "tune.log"
    opt = measure_option(FakeBuilder(n_parallel=2), FakeRunner(seed=0))
    autotvm.tuner.GridSearchTuner(plain).tune(
        len(plain.config_space), opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    t = autotvm.tuner.GridSearchTuner(haswell)
    t.tune(6, opt, resume_log=str(log))
    assert t.tune_stats["resumed"] == 0 and t.tune_stats["trials"] == 6
    assert str(t.best_measure_pair[0].target) == "llvm -mcpu=haswell"
    again = autotvm.tuner.GridSearchTuner(_task("llvm"))
    again.tune(len(plain.config_space), opt, resume_log=str(log))
    assert again.tune_stats["resumed"] == len(plain.config_space)
    assert again.tune_stats["trials"] == 0


@pytest.mark.parametrize("huge", [10**18, 1e18])
def test_best_is_bounded_on_huge_workloads(huge, tmp_path):
    """A line naming dense with N = 10^18 must not make ``templtune best`` factor 10^18."""
    line = {"input": ["llvm", "dense.x86", [1, huge, 512], {}],
            "config": {"index": 0, "code_hash": None,
                       "entity": [["tile_y", "sp", [-1, 1]], ["tile_x", "sp", [-1, 1]]]},
            "result": [[1e-3], 0, 0.1, 1.7e9], "version": 0.2, "tvm_version": "0"}
    path = tmp_path / "huge.log"
    path.write_text(json.dumps(line) + "\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "templtune.cli", "best", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "GFLOPS unknown" in proc.stdout
    assert time.monotonic() - t0 < 60


def _as_log(tmp_path: Path, first: bytes = b"") -> Path:
    src = ROOT / "tests" / "data" / "as_dense128_records.json"
    path = tmp_path / "as.json"
    path.write_bytes(first + src.read_bytes())
    return path


@pytest.mark.parametrize("cmd", [["best"], ["log", "read"], ["log", "split"]])
def test_wrong_format_is_named(cmd, tmp_path, capsys, caplog):
    path = _as_log(tmp_path)
    assert main([*cmd, str(path)]) == 1
    err = capsys.readouterr().err
    assert "is an auto-scheduler log (97 auto-scheduler records" in err
    assert "skipping" not in caplog.text


def test_pick_detects_the_format_from_the_whole_log(tmp_path, capsys):
    path = _as_log(tmp_path, first=b"5\n")
    out = tmp_path / "best.json"
    assert main(["log", "pick", str(path), "-o", str(out)]) == 0
    assert f"wrote 1 best records to {out}" in capsys.readouterr().out


def test_autotvm_log_named_for_auto_scheduler_distill(task, tmp_path, capsys):
    path = _write(tmp_path / "tune.log", [b"{broken\n", *_good_lines(task)])
    assert main(["auto-scheduler", "distill", str(path)]) == 1
    assert "is an AutoTVM log (6 AutoTVM records" in capsys.readouterr().err


def test_append_to_open_file_ends_a_torn_line(task, tmp_path):
    good = _good_lines(task)
    path = _write(tmp_path / "tune.log", [good[0], good[1][:50]])
    rec = list(record.load_from_file(_write(tmp_path / "g.log", good)))
    with open(path, "a", encoding="utf-8") as f:
        record.append_records(f, rec[2:])
    assert [inp.config.index for inp, _ in record.load_from_file(path)] == [0, 2, 3, 4, 5]


@pytest.mark.parametrize("tuner_cls", ["GridSearchTuner", "XGBTuner"])
def test_resume_ignores_hostile_records(tuner_cls, task, tmp_path):
    """Resume counts only trustworthy records: the best comes from a good one, and hostile
    lines neither crash the model-based tuner nor mark configs as measured."""
    good = _good_lines(task)
    lines = [ln for k in KINDS for ln in hostile(good[0])[k]]
    path = _write(tmp_path / "tune.log", lines + good)
    tuner = getattr(autotvm.tuner, tuner_cls)(task)
    opt = measure_option(FakeBuilder(n_parallel=2), FakeRunner(seed=0))
    tuner.tune(6, opt, resume_log=str(path))
    assert tuner.tune_stats["resumed"] == 6 and tuner.tune_stats["trials"] == 0
    assert tuner.best_config.index == BEST_INDEX
    assert record.check_config(task.config_space, tuner.best_config) is None
    tuner.tune(10, opt, resume_log=str(path))  # and goes on measuring new configs
    assert tuner.tune_stats["trials"] == 4
