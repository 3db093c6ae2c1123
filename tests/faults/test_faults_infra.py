"""Issue 16 item 15: a worker killed from outside is an infrastructure failure, not the
candidate's: the candidate is measured again, and a record of a second such death does not
stop a resume from measuring it."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from fault_kernels import Killer, pool_pid

from templtune.autotvm import record
from templtune.autotvm.measure import (
    FakeBuilder,
    FakeRunner,
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    create_measure_batch,
    measure_option,
)
from templtune.autotvm.task.task import create
from templtune.autotvm.tuner import GridSearchTuner

pytestmark = pytest.mark.slow


def _build_with_kills(tmp_path, monkeypatch, kills, sig=signal.SIGKILL):
    task = create("faults/slow", (2,), "llvm")
    inp = MeasureInput(task.target, task, task.config_space.get(0))
    builder = LocalBuilder(n_parallel=1, timeout=60)
    killer = Killer(tmp_path, lambda: pool_pid(builder), kills, sig)
    for k, v in killer.env().items():
        monkeypatch.setenv(k, v)
    runner = LocalRunner(timeout=60, number=1, repeat=1, cooldown_interval=0)
    batch = create_measure_batch(task, measure_option(builder, runner))
    try:
        with killer:
            (res,) = batch([inp])
    finally:
        batch.close()
    assert len(killer.killed) == kills, "the fault was not injected"
    return task, inp, res


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_build_worker_killed_once_is_built_again(tmp_path, monkeypatch, sig):
    _, _, res = _build_with_kills(tmp_path, monkeypatch, 1, sig)
    assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_detail[:500]
    assert not res.infra_error


def test_infra_failure_does_not_block_resume(tmp_path, monkeypatch):
    task, inp, res = _build_with_kills(tmp_path, monkeypatch, 2)
    assert res.error_no != MeasureErrorNo.NO_ERROR and res.infra_error
    log = tmp_path / "tune.json"
    other = MeasureInput(task.target, task, task.config_space.get(1))
    done = FakeRunner(seed=0)._result(1, time.time())
    record.append_records(str(log), [(inp, res), (other, done)])
    assert json.loads(log.read_text().splitlines()[0])["infra_error"] is True
    runner = FakeRunner(seed=0)
    GridSearchTuner(task).tune(n_trial=len(task.config_space), resume_log=str(log),
                               measure_option=measure_option(FakeBuilder(n_parallel=1), runner))
    assert runner.measured == [0]  # the infra failure again, not the measured config 1


def test_measurement_process_killed_while_running_is_run_again():
    task = create("faults/slow", (2,), "llvm")
    fast, slow = (MeasureInput(task.target, task, task.config_space.get(i)) for i in (0, 1))
    builder = LocalBuilder(n_parallel=2, timeout=60)
    runner = LocalRunner(timeout=120, number=1, repeat=1, cooldown_interval=0,
                         check_correctness=False)
    builder.set_task(task)
    runner.set_task(task)
    killed: list[int] = []

    def kill_soon() -> None:
        time.sleep(1.0)  # NOTE: one call of the slow kernel takes seconds
        pid = pool_pid(runner)
        assert pid is not None
        import os

        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    try:
        brs = builder.build([fast, slow])
        assert all(b.ok for b in brs), [b.error_detail[:300] for b in brs]
        assert runner.run([fast], brs[:1])[0].error_no == MeasureErrorNo.NO_ERROR  # warm
        t = threading.Thread(target=kill_soon)
        t.start()
        (res,) = runner.run([slow], brs[1:])
        t.join()
    finally:
        builder.close()
        runner.close()
    assert killed, "the fault was not injected"
    assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_detail[:500]
    assert pool_pid(runner) is None or pool_pid(runner) != killed[0]
