"""``templtune log ...`` end to end (main(argv) and one real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from templtune import autotvm, te
from templtune.autotvm import record
from templtune.autotvm.measure import MeasureInput, MeasureResult
from templtune.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


@autotvm.template("test_cli/scale")
def scale(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    autotvm.get_config().define_split("tile", s[B].op.axis[0], num_outputs=2)
    return s, [A, B]


@pytest.fixture()
def log(tmp_path) -> Path:
    t8 = autotvm.task.create("test_cli/scale", (8,), "llvm")
    t16 = autotvm.task.create("test_cli/scale", (16,), "llvm")

    def rec(task, i, cost, err=0):
        return (MeasureInput(task.target, task, task.config_space.get(i)),
                MeasureResult((cost,), err, 0.1, 1_700_000_000.0 + i))

    path = tmp_path / "tune.log"
    record.save_to_file([rec(t8, 0, 0.004), rec(t8, 1, 0.002), rec(t16, 2, 0.003),
                         rec(t16, 3, 0.1, err=7), rec(t16, 4, 0.001)], path)
    return path


def test_read_table(log, capsys):
    assert main(["log", "read", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["#", "target", "task", "args", "config", "cost(ms)"]
    assert len(out) == 2 + 5 + 1
    assert "test_cli/scale" in out[2] and "4.0000" in out[2]
    assert "RUN_TIMEOUT" in out[5]
    assert out[-1] == "5 records, 1 failed, best 1.0000 ms"
    assert main(["log", "read", str(log), "--begin", "1", "--end", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[2:-1]] == ["1", "2"]


def test_read_tolerates_corrupt_lines(log, capsys, caplog):
    with open(log, "a") as f:
        f.write("{broken\n")
    assert main(["log", "read", str(log)]) == 0
    assert f"{log}:6: skipping corrupt record" in caplog.text
    assert capsys.readouterr().out.splitlines()[-1].startswith("5 records")


@pytest.mark.parametrize("mode", ["pick", "distill"])
def test_pick_and_distill(log, tmp_path, capsys, mode):
    out = tmp_path / "best.log"
    assert main(["log", mode, str(log), "-o", str(out)]) == 0
    assert f"wrote 2 best records to {out}" in capsys.readouterr().out
    idx = [(inp.task.args, inp.config.index) for inp, _ in record.load_from_file(out)]
    assert idx == [((8,), 1), ((16,), 4)]
    assert main(["log", mode, str(log)]) == 0
    assert Path(f"{log}.best.log").exists()


def test_split(log, tmp_path, capsys):
    assert main(["log", "split", str(log), "--out-dir", str(tmp_path / "parts")]) == 0
    out = capsys.readouterr().out
    assert "tune.log.000.wkl: 2 records" in out and "2 workloads" in out
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == ["tune.log.000.wkl",
                                                                      "tune.log.001.wkl"]


@pytest.mark.parametrize("argv,code", [
    (["log"], 2), (["log", "read"], 2), (["nope"], 2), (["log", "read", "x", "--begin", "a"], 2),
    (["log", "read", "/no/such/file.log"], 1), (["log", "pick", "/no/such/file.log"], 1),
])
def test_malformed_arguments(argv, code, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error" in err
    if code == 1:
        assert err.strip().splitlines() == [err.strip()]  # exactly one line
        assert err.startswith("templtune: error: no such log file")


def test_bad_range_and_auto_scheduler_log(log, tmp_path, capsys):
    assert main(["log", "read", str(log), "--begin", "3", "--end", "1"]) == 1
    assert capsys.readouterr().err.startswith("templtune: error: bad record range")
    ansor = tmp_path / "ansor.json"
    ansor.write_text(json.dumps({"i": [["x"], []], "r": [[1.0], 0, 1.0, 0], "v": "v0.6"}) + "\n")
    # auto_scheduler logs are distilled by the auto-scheduler's reader; a record it cannot
    # parse is skipped with a warning, leaving nothing to keep
    assert main(["log", "distill", str(ansor), "-o", str(tmp_path / "o.json")]) == 0
    assert "wrote 0 best records" in capsys.readouterr().out
    assert main(["log", "read", str(tmp_path)]) == 1
    assert "is a directory" in capsys.readouterr().err


def test_subprocess_end_to_end(log):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "templtune.cli", "log", "pick", str(log)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert Path(f"{log}.best.log").exists()
    with open(log, "a") as f:
        f.write('{"input": ["llvm", "trunc')
    run = subprocess.run([sys.executable, "-m", "templtune.cli", "log", "read", str(log)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and "5 records" in run.stdout
    assert f"{log}:6: skipping truncated record" in run.stderr
    run = subprocess.run([sys.executable, "-m", "templtune.cli", "log", "read", "/no/file"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip() == "templtune: error: no such log file: /no/file"
