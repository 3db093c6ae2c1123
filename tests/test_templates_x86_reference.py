"""The pre-tuned reference logs shipped in templates/logs/cpu/ ("tophub")."""

from __future__ import annotations

import pytest

from templtune import autotvm
from templtune.autotvm.record import load_from_file
from templtune.autotvm.task.reference import FAMILY_LOGS, IsaFamily, isa_family
from templtune.autotvm.task.task import args_to_workload
from templtune.target import Target
from templtune.templates import CATALOG, load, reference_log_dir

load("x86")
FAMILY_FILES = [reference_log_dir() / "cpu" / name for name in FAMILY_LOGS.values()]
# the log the host's target uses: its ISA family's (the other family's when that is missing)
_HOST = reference_log_dir() / "cpu" / FAMILY_LOGS[isa_family("llvm") or IsaFamily.AVX2]
LOG = _HOST if _HOST.exists() else FAMILY_FILES[0]
SEED = (1, 7, 7, 512, 512, 3, 3, 1, 1)


def _records(log=LOG):
    return list(load_from_file(log))


@pytest.mark.parametrize("log", [f for f in FAMILY_FILES if f.exists()], ids=lambda f: f.name)
def test_reference_log_is_shipped_and_clean(log):
    recs = _records(log)
    assert recs, f"{log} is empty"
    seen = set()
    for inp, res in recs:
        assert int(res.error_no) == 0 and res.costs
        assert inp.task.name in CATALOG
        # one record per workload and thread count (a record without one: 1 thread)
        key = (inp.task.name, tuple(inp.task.args), res.threads or 1)
        assert key not in seen, f"duplicate workload {key}"
        seen.add(key)
    assert ("conv2d_nchw", SEED, 1) in seen


@pytest.mark.parametrize("log", [f for f in FAMILY_FILES if f.exists()], ids=lambda f: f.name)
def test_every_reference_config_instantiates(log):
    for inp, _ in _records(log):
        task = autotvm.task.create(inp.task.name, inp.task.args, "llvm")
        s, args = task.instantiate(inp.config)
        assert args


@pytest.fixture
def reference_dir(monkeypatch):
    # NOTE: until the reference-log search path includes templtune/templates/logs, point it there.
    monkeypatch.setenv("TEMPLTUNE_REFERENCE_LOG_DIR", str(reference_log_dir()))
    monkeypatch.delenv("TEMPLTUNE_NO_TOPHUB", raising=False)


def _fallback_config(workload):
    with autotvm.FallbackContext() as ctx:
        return ctx.query(Target("llvm"), workload)


def test_fallback_uses_reference_log(reference_dir):
    ref = {(i.task.name, tuple(i.task.args)): i.config for i, _ in _records()}
    cfg = _fallback_config(args_to_workload(SEED, "conv2d_nchw"))
    assert not getattr(cfg, "is_fallback", False)
    assert str(cfg) == str(ref[("conv2d_nchw", SEED)])


def test_reference_logs_can_be_switched_off(reference_dir, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_NO_TOPHUB", "1")
    cfg = _fallback_config(args_to_workload(SEED, "conv2d_nchw"))
    assert getattr(cfg, "is_fallback", False)


def test_a_fallback_context_follows_the_reference_switch(reference_dir):
    """A config answered from the reference log is not served with reference logs off (one
    process toggling the switch, as the workload refresh and the studies do), nor the
    reverse."""
    from templtune.autotvm import env

    wkl = args_to_workload(SEED, "conv2d_nchw")
    with autotvm.FallbackContext() as ctx:
        target = Target("llvm")
        assert not getattr(ctx.query(target, wkl), "is_fallback", False)
        with env.scope(use_reference_logs=False):
            assert ctx.query(target, wkl).is_fallback
        assert not getattr(ctx.query(target, wkl), "is_fallback", False)
        ctx.clear_cache(target, wkl)
        with env.scope(use_reference_logs=False):
            assert ctx.query(target, wkl).is_fallback
