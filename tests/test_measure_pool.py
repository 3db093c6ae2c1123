"""The measurement worker pool: results as data, crashes and hangs isolated, workers replaced."""

from __future__ import annotations

import ctypes
import os
import time

import pytest

from templtune.autotvm.measure import MeasureInput
from templtune.measure.measure import MeasureErrorNo, MeasureResult, error_result, measure_option
from templtune.measure.pool import WorkerPool


def _double(x):
    return 2 * x


def _raise(x):
    raise KeyError(f"bad {x}")


def _segfault(x):
    ctypes.string_at(0)


def _hang(x):
    time.sleep(60)


def _pid(x):
    return os.getpid()


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2)
    yield p
    p.close()


def test_map_in_order(pool):
    outs = pool.map(_double, [(i,) for i in range(20)], timeout=30)
    assert [o.status for o in outs] == ["ok"] * 20
    assert [o.value for o in outs] == [2 * i for i in range(20)]


def test_errors_are_data(pool):
    (out,) = pool.map(_raise, [(3,)], timeout=30)
    assert out.status == "error" and out.error_type == "KeyError"
    assert "bad 3" in out.message and "_raise" in out.traceback


def test_crash_and_hang_replace_only_that_worker(pool):
    outs = pool.map(_segfault, [(0,)], timeout=30)
    assert outs[0].status == "died" and "SIGSEGV" in outs[0].message
    t0 = time.perf_counter()
    outs = pool.map(_hang, [(0,)], timeout=1.0)
    assert outs[0].status == "timeout"
    assert time.perf_counter() - t0 < 10
    # the pool still works after both
    assert [o.value for o in pool.map(_double, [(1,), (2,), (3,)], timeout=30)] == [2, 4, 6]


def test_mixed_batch(pool):
    outs = pool.map(_mixed, [(i,) for i in range(6)], timeout=2.0)
    assert [o.status for o in outs] == ["ok", "error", "died", "timeout", "ok", "ok"]


def _mixed(i):
    if i == 1:
        raise ValueError("x")
    if i == 2:
        _segfault(0)
    if i == 3:
        _hang(0)
    return i


def test_workers_are_persistent(pool):
    pids = {o.value for o in pool.map(_pid, [(i,) for i in range(10)], timeout=30)}
    again = {o.value for o in pool.map(_pid, [(i,) for i in range(10)], timeout=30)}
    assert pids == again and len(pids) <= 2


def test_measure_result_repr_and_unpack():
    r = MeasureResult((0.5,), 0, 1.0, 2.0)
    assert "error_no=MeasureErrorNo.NO_ERROR" in repr(r)
    costs, err, all_cost, ts = r
    assert costs == (0.5,) and err == 0 and r.ok and r.mean_cost == 0.5
    e = error_result(MeasureErrorNo.RUN_TIMEOUT, "slow", 10, 3.0)
    assert not e.ok and e.costs == (1e9,) and e.error_detail == "slow"
    assert "MeasureErrorNo.RUN_TIMEOUT" in repr(e)
    assert [int(x) for x in MeasureErrorNo] == list(range(9))
    target, task, config = MeasureInput("llvm", None, 3)
    assert (target, config) == ("llvm", 3)


def test_measure_option_strings():
    with pytest.raises(ValueError):
        measure_option("remote", "local")
    with pytest.raises(ValueError):
        measure_option("local", "rpc")
    opt = measure_option("local", "local")
    assert type(opt["builder"]).__name__ == "LocalBuilder"
    assert type(opt["runner"]).__name__ == "LocalRunner"
    assert opt["runner"].number == 4 and opt["runner"].repeat == 3
    assert opt["runner"].cooldown_interval == 0.1 and opt["builder"].timeout == 10


def _sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def test_interrupted_map_does_not_leak_stale_answers():
    p = WorkerPool(2)
    try:
        calls = []

        def prepare(k):
            calls.append(k)
            if len(calls) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            p.map(_sleep_then, [(0.3, "stale"), (0.0, "x")], timeout=30, prepare=prepare)
        time.sleep(0.5)
        assert [o.value for o in p.map(_double, [(5,), (6,)], timeout=30)] == [10, 12]
    finally:
        p.close()
