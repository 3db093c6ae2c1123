"""TVM's log tools as ``python -m`` commands, run as real subprocesses on real log files:
``templtune.autotvm.record --mode read|pick|split`` and
``templtune.auto_scheduler.measure_record --mode distill``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from templtune import autotvm, templates
from templtune.autotvm import record
from templtune.measure.fake import FakeBuilder, FakeRunner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")


def _module(*args: str) -> subprocess.CompletedProcess[str]:
    # cwd = the checkout root, so ``-m`` imports this worktree's templtune
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def autotvm_log(tmp_path_factory) -> str:
    """A log of two dense workloads (built-in template), 8 fake-measured trials each."""
    templates.load("x86")
    path = str(tmp_path_factory.mktemp("atvm") / "in.log")
    for n in (32, 64):
        task = autotvm.task.create("dense", args=(n, n, n), target="llvm")
        tuner = autotvm.tuner.RandomTuner(task, seed=n)
        tuner.tune(n_trial=8, measure_option=autotvm.measure_option(
            builder=FakeBuilder(n_parallel=4), runner=FakeRunner(seed=n)),
            callbacks=[autotvm.callback.log_to_file(path)])
    return path


def _best_per_workload(path: str) -> dict[str, float]:
    best: dict[str, float] = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            costs, err = row["result"][0], row["result"][1]
            if err == 0:
                key = json.dumps(row["input"])
                mean = sum(costs) / len(costs)
                best[key] = min(best.get(key, float("inf")), mean)
    return best


def test_record_pick_writes_the_best_per_workload(autotvm_log: str, tmp_path) -> None:
    out = str(tmp_path / "out.log")
    proc = _module("templtune.autotvm.record", "--mode", "pick", "--i", autotvm_log, "--o", out)
    assert proc.returncode == 0, proc.stderr
    picked = _best_per_workload(out)
    with open(out) as f:
        assert len(f.readlines()) == 2
    assert picked == _best_per_workload(autotvm_log)
    # the same file as the library function writes
    ref = str(tmp_path / "ref.log")
    record.pick_best(autotvm_log, ref)
    with open(out) as a, open(ref) as b:
        assert a.read() == b.read()


def test_record_pick_default_output_name(autotvm_log: str, tmp_path) -> None:
    src = str(tmp_path / "tune.log")
    shutil.copy(autotvm_log, src)
    proc = _module("templtune.autotvm.record", "--mode", "pick", "--i", src)
    assert proc.returncode == 0, proc.stderr
    assert _best_per_workload(src + ".best.log") == _best_per_workload(src)


def test_record_read_prints_records_and_ir(autotvm_log: str) -> None:
    proc = _module("templtune.autotvm.record", "--i", autotvm_log, "--begin", "1", "--end", "3",
                   "--ir")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in open(autotvm_log)][1:3]
    for row in rows:  # TVM's config print ends in ",<code hash>,<index>"
        assert f",None,{row['config']['index']}\n" in proc.stdout
    assert proc.stdout.count("MeasureResult(") == 2
    assert proc.stdout.count("dense") >= 2
    assert proc.stdout.count("for (") >= 2  # the lowered loop nests


def test_record_split_and_help(autotvm_log: str, tmp_path) -> None:
    src = str(tmp_path / "s.log")
    shutil.copy(autotvm_log, src)
    proc = _module("templtune.autotvm.record", "--mode", "split", "--i", src)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["s.log", "s.log.000.wkl", "s.log.001.wkl"]
    helped = _module("templtune.autotvm.record", "--help")
    assert helped.returncode == 0
    assert "--mode {read,pick,split}" in helped.stdout and "--begin" in helped.stdout
    bad = _module("templtune.autotvm.record", "--mode", "pick")
    assert bad.returncode == 2 and "--i" in bad.stderr


def test_measure_record_distill(tmp_path) -> None:
    src = str(tmp_path / "log.json")
    shutil.copy(os.path.join(DATA, "as_dense128_records.json"), src)
    proc = _module("templtune.auto_scheduler.measure_record", "--mode", "distill", "--i", src)
    assert proc.returncode == 0, proc.stderr
    assert "Extract 1 best records" in proc.stderr
    with open(src + ".best.json") as f:
        lines = f.readlines()
    assert len(lines) == 1
    # the oracle: the lowest mean cost among the error-free records of the input
    def mean_cost(row: dict) -> float:
        return sum(row["r"][0]) / len(row["r"][0])

    rows = [json.loads(line) for line in open(src) if line.strip()]
    best = min((r for r in rows if r["r"][1] == 0), key=mean_cost)
    assert mean_cost(json.loads(lines[0])) == mean_cost(best)
    helped = _module("templtune.auto_scheduler.measure_record", "--help")
    assert helped.returncode == 0 and "--mode {distill}" in helped.stdout
