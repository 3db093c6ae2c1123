"""Dispatch contexts: ApplyConfig, ApplyHistoryBest, FallbackContext (warn once, strict mode),
reference logs, env switches (SPEC §2.3, §7 fact 17)."""

from __future__ import annotations

import logging
import threading

import pytest

from templtune import autotvm, te
from templtune.autotvm import env, record
from templtune.autotvm.dispatcher import (
    ApplyConfig,
    ApplyHistoryBest,
    ConfigNotFoundError,
    DispatchContext,
    FallbackContext,
    apply_history_best,
    clear_fallback_cache,
)
from templtune.autotvm.measure import MeasureInput, MeasureResult
from templtune.errors import TargetError
from templtune.target import Target

SEEN: list = []


@autotvm.template("test_dispatch/add")
def add(n):
    cfg = autotvm.get_config()
    SEEN.append(cfg)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    cfg.define_split("tile", s[B].op.axis[0], num_outputs=2)
    cfg.define_knob("u", [0, 1])
    return s, [A, B]


def _task(n, target="llvm"):
    return autotvm.task.create("test_dispatch/add", (n,), target)


def _rec(task, index, cost, error=0, target=None):
    tgt = task.target if target is None else Target(target)
    return (MeasureInput(tgt, task, task.config_space.get(index)),
            MeasureResult((cost,), error, 0.0, 0.0))


def _fallback_warnings(caplog):
    return [r for r in caplog.records
            if r.name == "autotvm" and "fallback" in r.getMessage()]


def test_no_context_gives_fallback_and_warns_once(caplog):
    with FallbackContext(), caplog.at_level(logging.WARNING, logger="autotvm"):
        with Target("llvm"):
            add(32)
            add(32)
            assert SEEN[-1].is_fallback and SEEN[-1] is SEEN[-2]
            add(64)
    warns = _fallback_warnings(caplog)
    assert len(warns) == 2
    assert "('test_dispatch/add', 32)" in warns[0].getMessage()
    assert "llvm" in warns[0].getMessage()


def test_root_context_and_silent(caplog):
    assert isinstance(DispatchContext.current, FallbackContext)
    with env.scope(silent=True), caplog.at_level(logging.WARNING, logger="autotvm"):
        with Target("llvm"):
            add(1000)
    assert not _fallback_warnings(caplog)
    assert SEEN[-1].is_fallback


def test_strict_modes(monkeypatch):
    with FallbackContext(strict=True), Target("llvm"):
        with pytest.raises(ConfigNotFoundError, match=r"'test_dispatch/add', 8\)"):
            add(8)
    with FallbackContext(), env.scope(strict=True), Target("llvm"):
        with pytest.raises(ConfigNotFoundError):
            add(8)
    monkeypatch.setenv("TEMPLTUNE_AUTOTVM_STRICT", "1")
    with FallbackContext(), Target("llvm"):
        with pytest.raises(ConfigNotFoundError):
            add(8)
    monkeypatch.delenv("TEMPLTUNE_AUTOTVM_STRICT")
    task = _task(8)
    with apply_history_best([_rec(task, 1, 1.0)], strict=True), Target("llvm"):
        add(8)
        assert SEEN[-1].index == 1
        with pytest.raises(ConfigNotFoundError, match="strict"):
            add(16)


def test_apply_config_nesting_and_restore():
    task = _task(16)
    c1, c2 = task.config_space.get(1), task.config_space.get(2)
    root = DispatchContext.current
    with ApplyConfig(c1) as outer:
        assert DispatchContext.current is outer
        with ApplyConfig(c2):
            s, _ = add(16)
            assert SEEN[-1] is c2
        add(16)
        assert SEEN[-1] is c1 and outer.workload == ("test_dispatch/add", 16)
    assert DispatchContext.current is root


def test_apply_history_best_picks_best_and_ignores_errors():
    t16, t32 = _task(16), _task(32)
    recs = [_rec(t16, 0, 3.0), _rec(t16, 4, 1.0), _rec(t16, 5, 1.0), _rec(t16, 6, 0.1, error=4),
            _rec(t32, 2, 2.0), _rec(t16, 7, 0.5, target="cuda -model=a100")]
    ctx = ApplyHistoryBest(recs)
    assert ctx.query(Target("llvm"), t16.workload).index == 4  # tie keeps the first
    assert ctx.query("llvm -mcpu=znver4", t32.workload).index == 2
    assert ctx.query(Target("cuda"), t16.workload).index == 7  # by key "cuda"
    assert ctx.query(Target("cuda -model=a100"), t16.workload).index == 7
    with ctx, Target("llvm"):
        add(16)
        assert SEEN[-1].index == 4
        add(48)  # miss: delegated to the fallback
        assert SEEN[-1].is_fallback
    with pytest.raises(TargetError, match="target"):
        ctx.query(None, t16.workload)
    new = t16.config_space.get(9)
    ctx.update(Target("llvm"), t16.workload, new)
    assert ctx.query("llvm", t16.workload) is new and new.cost == 0


def test_model_key_preferred():
    t = _task(16)
    recs = [_rec(t, 1, 0.1, target="cuda -model=v100"), _rec(t, 2, 0.5, target="cuda -model=a100")]
    ctx = ApplyHistoryBest(recs)
    assert ctx.query(Target("cuda -model=a100"), t.workload).index == 2
    assert ctx.query(Target("cuda"), t.workload).index == 1


def test_threads_start_at_root():
    task = _task(16)
    out = []
    with ApplyConfig(task.config_space.get(3)):
        th = threading.Thread(target=lambda: out.append(DispatchContext.current))
        th.start()
        th.join()
    assert isinstance(out[0], FallbackContext)


def test_clear_fallback_cache():
    ctx = FallbackContext()
    with ctx, env.scope(silent=True), Target("llvm"):
        add(24)
        first = SEEN[-1]
        clear_fallback_cache(Target("llvm"), ("test_dispatch/add", 24))
        add(24)
        assert SEEN[-1] is not first


def test_reference_logs(tmp_path, monkeypatch):
    task = _task(40)
    (tmp_path / "cpu").mkdir()
    record.save_to_file([_rec(task, 3, 0.2), _rec(task, 5, 0.1)], tmp_path / "cpu" / "ref.log")
    monkeypatch.setenv("TEMPLTUNE_REFERENCE_LOG_DIR", str(tmp_path))
    with FallbackContext(), Target("llvm"):
        add(40)
        assert not SEEN[-1].is_fallback and SEEN[-1].index == 5
    from templtune.autotvm.task.reference import load_reference_log

    assert [inp.config.index for inp, _ in load_reference_log("llvm", "test_dispatch/add")] \
        == [3, 5]
    with FallbackContext(), env.scope(use_reference_logs=False, silent=True), Target("llvm"):
        add(40)
        assert SEEN[-1].is_fallback
    monkeypatch.setenv("TEMPLTUNE_NO_TOPHUB", "1")
    with FallbackContext(), env.scope(silent=True), Target("llvm"):
        add(40)
        assert SEEN[-1].is_fallback
    assert load_reference_log("llvm", "test_dispatch/add") == []


def test_global_scope_and_snapshot():
    with env.scope():
        autotvm.GLOBAL_SCOPE.in_tuning = True
        assert env.current().in_tuning and autotvm.GLOBAL_SCOPE.in_tuning
        snap = env.snapshot()
    assert not env.current().in_tuning
    with env.scope():
        env.restore(snap)
        assert env.current().in_tuning
    with pytest.raises(AttributeError):
        autotvm.GLOBAL_SCOPE.nope = 1


def test_apply_fixed_config_and_graph_best(caplog):
    from templtune.autotvm.dispatcher import ApplyFixedConfig, ApplyGraphBest

    t8, t16 = _task(8), _task(16)
    with ApplyFixedConfig([t8], "test_dispatch/add"), Target("llvm"):
        add(8)
        assert SEEN[-1].index == 0 and SEEN[-1].cost == 1e-6
    with ApplyFixedConfig([t8], ["other"]) as ctx, Target("llvm"):
        add(8)
        assert SEEN[-1].cost == 1e5 and ctx.workload == t8.workload
    with ApplyGraphBest([_rec(t8, 3, 1.0), _rec(t16, 4, 1.0)]), Target("llvm"), \
            caplog.at_level(logging.WARNING, logger="autotvm"):
        add(8)
        assert SEEN[-1].index == 3
        add(16)
        assert SEEN[-1].index == 4
        add(16)
        assert SEEN[-1].is_fallback
    assert any("ApplyGraphBest" in r.getMessage() for r in caplog.records)
    with ApplyGraphBest([_rec(t8, 3, 1.0)]), Target("llvm"):
        with pytest.raises(Exception, match="ApplyGraphBest"):
            add(16)


def test_query_cost_follows_the_query():
    t16, t32 = _task(16), _task(32)
    ctx = ApplyHistoryBest([_rec(t16, 0, 3.0), _rec(t16, 4, 1.0), _rec(t16, 6, 0.1, error=4)])
    llvm = Target("llvm")
    assert ctx.query_cost(llvm, t16.workload) == 1.0  # the best successful record
    assert ctx.query_cost(llvm, t32.workload) is None  # a miss: the fallback has no cost
    with ctx:
        assert autotvm.DispatchContext.current.query_cost(llvm, t16.workload) == 1.0
    ctx.update(llvm, t32.workload, t32.config_space.get(1))
    assert ctx.query_cost(llvm, t32.workload) == 0.0  # user-defined answers cost nothing


def test_history_names_are_importable_from_the_tvm_paths():
    """``ApplyHistoryBest`` lives in ``autotvm.history``; TVM's paths give the same objects."""
    from templtune.autotvm import dispatcher, history
    from templtune.autotvm.task import dispatcher as task_dispatcher

    for name in ("ApplyHistoryBest", "apply_history_best"):
        obj = getattr(history, name)
        assert getattr(dispatcher, name) is obj
        assert getattr(task_dispatcher, name) is obj
        assert getattr(autotvm, name) is obj
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dispatcher.nope  # noqa: B018
