"""Throughput measures of the measurement pipeline keep behaviour: no double warm-up, one cooldown
per batch, workers launched early."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from templtune import te
from templtune.autotvm.measure import LocalRunner, MeasureErrorNo
from templtune.measure import worker as W
from templtune.measure.measure import BuildResult, MeasureResult
from templtune.measure.pool import WorkerPool

_CALLS: list[tuple[str, dict]] = []


class _FakeModule:
    """Picklable stand-in for a built module: records how the runner drives it."""

    entry_name = "default_function"

    def __call__(self, *arrays: np.ndarray) -> None:
        _CALLS.append(("call", {}))
        arrays[-1][...] = arrays[0] + arrays[1]

    def time_evaluator(self, name, dev, **kwargs):
        _CALLS.append(("time_evaluator", dict(kwargs)))

        def run(*arrays):
            class R:
                results = (1e-3,) * kwargs["repeat"]

            return R()

        return run


def test_runner_does_not_warm_up_twice():
    _CALLS.clear()
    a = np.ones(4, "float32")
    W.load_run_state(W.LoadRequest("tok", W.RunSetup(
        (a, a * 2, np.zeros(4, "float32")), (2,), (a * 3,), "", "cpu")))
    art = W._PICKLED + pickle.dumps(_FakeModule())
    reply = W.run_candidate(W.RunRequest("tok", art, True, W.TimingOptions(
        4, 3, 0.0, False, 1e-3, 1e-4, 10.0)))
    assert reply.error_no == MeasureErrorNo.NO_ERROR and len(reply.costs) == 3
    assert [c for c, _ in _CALLS] == ["call", "time_evaluator"]
    assert _CALLS[1][1]["warmup"] == 0
    assert _CALLS[1][1]["number"] == 4 and _CALLS[1][1]["repeat"] == 3


def test_time_evaluator_warmup_option():
    import templtune

    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    mod = templtune.build(te.create_schedule(B.op), [A, B], target="llvm")
    a, b = np.arange(n, dtype="float32"), np.zeros(n, "float32")
    for warmup in (0, 1, 3):
        res = mod.time_evaluator(mod.entry_name, templtune.cpu(), number=2, repeat=2,
                                 warmup=warmup)(a, b)
        assert len(res.results) == 2 and all(r >= 0 for r in res.results)
    np.testing.assert_allclose(b, a * 2)
    with pytest.raises(ValueError):
        mod.time_evaluator(mod.entry_name, templtune.cpu(), warmup=-1)


@pytest.mark.parametrize("n_ok,n_failed,sleeps", [(3, 0, 1), (1, 2, 1), (0, 3, 0)])
def test_cooldown_once_per_batch(monkeypatch, n_ok, n_failed, sleeps):
    import templtune.measure.runner as lr

    slept: list[float] = []
    monkeypatch.setattr(lr.time, "sleep", slept.append)
    runner = LocalRunner(cooldown_interval=0.25)
    monkeypatch.setattr(runner, "_run_one",
                        lambda br: MeasureResult((1e-3,), MeasureErrorNo.NO_ERROR, 0.0, 0.0))
    ok = BuildResult(b"x", MeasureErrorNo.NO_ERROR, "", 0.0)
    bad = BuildResult(None, MeasureErrorNo.COMPILE_HOST, "boom", 0.0)
    brs = [ok] * n_ok + [bad] * n_failed
    results = runner.run([None] * len(brs), brs)
    assert [r.error_no for r in results] == [b.error_no for b in brs]
    assert slept == [0.25] * sleeps
    slept.clear()
    LocalRunner.run(runner, [None], [ok])  # one candidate per call: one cooldown per candidate
    assert slept == [0.25]


def _double(x):
    return 2 * x


def test_pool_spawn_then_map():
    pool = WorkerPool(2)
    try:
        pool.spawn()
        procs = [w.proc.pid for w in pool._workers]
        pool.spawn()  # idempotent: no second launch
        assert [w.proc.pid for w in pool._workers] == procs
        outs = pool.map(_double, [(1,), (2,), (3,)], timeout=60)
        assert [o.value for o in outs] == [2, 4, 6]
        assert [w.proc.pid for w in pool._workers] == procs
    finally:
        pool.close()
