"""Issue 16 item 1: a death of the measurement process during reference set-up.

The measurement process is SIGKILLed by pid while it computes the reference (it announces
itself from inside the template). Checking must survive one death; only a reference that dies
the same way twice turns checking off, loudly and in every record.
"""

from __future__ import annotations

import json
import logging

import pytest
from fault_kernels import Killer, N, pool_pid

from templtune.autotvm import record
from templtune.autotvm.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    create_measure_batch,
    measure_option,
)
from templtune.autotvm.task.task import create

pytestmark = pytest.mark.slow


def _measure_with_kills(tmp_path, monkeypatch, kills):
    task = create("faults/matmul", (N,), "llvm")
    space = task.config_space
    ok = [c for c in (space.get(i) for i in range(len(space))) if c["mode"].val == "ok"]
    zero = [c for c in (space.get(i) for i in range(len(space))) if c["mode"].val == "zero"]
    runner = LocalRunner(timeout=60, number=1, repeat=1, cooldown_interval=0)
    killer = Killer(tmp_path, lambda: pool_pid(runner), kills)
    for k, v in killer.env().items():
        monkeypatch.setenv(k, v)
    batch = create_measure_batch(task, measure_option(LocalBuilder(n_parallel=1, timeout=60),
                                                      runner))
    configs = [ok[0], *zero[:3], ok[1]]
    inputs = [MeasureInput(task.target, task, c) for c in configs]
    try:
        with killer:
            results = batch(inputs)
    finally:
        batch.close()
    assert len(killer.killed) == kills, "the fault was not injected"
    return inputs, results


def test_one_death_during_setup_keeps_checking(tmp_path, monkeypatch):
    inputs, results = _measure_with_kills(tmp_path, monkeypatch, 1)
    codes = [r.error_no for r in results]
    assert codes == [MeasureErrorNo.NO_ERROR] + [MeasureErrorNo.WRONG_ANSWER] * 3 + [
        MeasureErrorNo.NO_ERROR], [r.error_detail[:300] for r in results]
    assert all(r.checked for r in results)


def test_two_deaths_turn_checking_off_loudly(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="templtune.measure"):
        inputs, results = _measure_with_kills(tmp_path, monkeypatch, 2)
    assert any("NOT CHECKED" in r.getMessage() for r in caplog.records)
    assert all(r.error_no == MeasureErrorNo.NO_ERROR for r in results)
    assert not any(r.checked for r in results)
    log = tmp_path / "records.json"
    record.append_records(str(log), zip(inputs, results))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(row["checked"] is False for row in rows)
    assert all(not res.checked for _, res in record.load_from_file(str(log)))
