"""templtune.config: one typed table of environment knobs, read live, overridable in scope()."""

from __future__ import annotations

import logging
import pathlib
import re
from pathlib import Path

import pytest

from templtune import config
from templtune.config import KNOBS, ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_table_is_the_generated_one():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- knobs:begin -->\n(.*?)\n<!-- knobs:end -->", text, re.S)
    assert block is not None, "README has no knob table"
    assert block.group(1) == config.markdown_table()
    for knob in KNOBS:
        assert f"| `{knob.name}` |" in block.group(1)


def _sources() -> list[pathlib.Path]:
    files = sorted((ROOT / "templtune").rglob("*.py")) + sorted((ROOT / "templates").rglob("*.py"))
    return [p for p in files if "templates" not in p.relative_to(ROOT).parts[1:2]]


def test_environment_is_read_only_through_config():
    offenders = []
    for path in _sources():
        if path.name == "config.py" and path.parent.name == "templtune":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"os\.environ|os\.getenv|getenv\(", line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "environment read outside templtune/config.py:\n" + "\n".join(offenders)


def test_every_mentioned_variable_is_a_knob():
    names = {k.name for k in KNOBS} | {a for k in KNOBS for a in k.aliases}
    mentioned = set()
    for path in [*_sources(), *sorted((ROOT / "tests").glob("*.py"))]:
        mentioned |= set(re.findall(r"\bTEMPLTUNE_[A-Z0-9_]+", path.read_text()))
    assert mentioned - names == set()


@pytest.mark.parametrize("text,want", [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("False", False), ("no", False), ("off", False),
])
def test_booleans_parse_the_same_for_every_bool_knob(monkeypatch, text, want):
    for knob in KNOBS:
        if knob.type is config.KnobType.BOOL:
            monkeypatch.setenv(knob.name, text)
            assert config.get(knob.name) is want, knob.name


def test_bad_values_warn_and_fall_back(monkeypatch, caplog):
    monkeypatch.setenv("TEMPLTUNE_RUNNER_PIN_MALLOC", "maybe")
    monkeypatch.setenv("TEMPLTUNE_NUM_THREADS", "lots")
    monkeypatch.setenv("TVM_NUM_THREADS", "3")
    with caplog.at_level(logging.WARNING, logger="templtune.config"):
        assert config.get("TEMPLTUNE_RUNNER_PIN_MALLOC") is True  # the default
        assert config.get("TEMPLTUNE_NUM_THREADS") == 3  # then the alias
    assert "TEMPLTUNE_NUM_THREADS='lots'" in caplog.text
    monkeypatch.setenv("TEMPLTUNE_NUM_THREADS", "0")  # below the minimum
    monkeypatch.delenv("TVM_NUM_THREADS")
    assert config.get("TEMPLTUNE_NUM_THREADS") is None
    monkeypatch.setenv("TEMPLTUNE_CUDA_EMULATOR", "fast")  # not a choice
    assert config.get("TEMPLTUNE_CUDA_EMULATOR") == "llvm"
    monkeypatch.setenv("TEMPLTUNE_DEBUG", "")  # empty is unset
    assert config.get("TEMPLTUNE_DEBUG") is False


def test_paths(monkeypatch, tmp_path):
    import os

    monkeypatch.setenv("TEMPLTUNE_REFERENCE_LOG_DIR", os.pathsep.join([str(tmp_path), "", "~/x"]))
    assert config.get("TEMPLTUNE_REFERENCE_LOG_DIR") == (tmp_path, Path("~/x").expanduser())
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path))
    assert config.get("cuda_cache") == tmp_path


def test_scope_overrides_nest_and_restore(monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_NUM_THREADS", "5")
    with config.scope(num_threads=2):
        assert config.get("TEMPLTUNE_NUM_THREADS") == 2
        with config.scope(TEMPLTUNE_NUM_THREADS=None):  # as if unset, even though the env is
            assert config.get("TEMPLTUNE_NUM_THREADS") is None
        assert config.get("TEMPLTUNE_NUM_THREADS") == 2
    assert config.get("TEMPLTUNE_NUM_THREADS") == 5


@pytest.mark.parametrize("kw,match", [
    ({"no_such_knob": 1}, "unknown configuration knob"),
    ({"num_threads": "2"}, "takes a int"),
    ({"debug": 1}, "takes a bool"),
    ({"num_threads": True}, "takes a int"),
    ({"num_threads": 0}, ">= 1"),
    ({"cuda_emulator": "fast"}, "must be one of"),
])
def test_scope_rejects_bad_overrides(kw, match):
    with pytest.raises(ConfigError, match=match), config.scope(**kw):
        pass


def test_get_unknown_knob():
    name = "TEMPLTUNE_" + "NOPE"  # spelled in two parts: not a knob mention
    with pytest.raises(ConfigError, match=name):
        config.get(name)


def test_consumers_read_the_knobs(monkeypatch):
    from templtune.autotvm import env
    from templtune.codegen.cuda.compile import cache_dir
    from templtune.codegen.llvm.compile import default_num_threads

    with config.scope(num_threads=3):
        assert default_num_threads() == 3
    with config.scope(autotvm_strict=True):
        assert env.strict_enabled()
    with config.scope(no_tophub=True):
        assert not env.reference_logs_enabled()
    with config.scope(cuda_cache="/tmp/templtune-cache-x"):
        assert cache_dir() == Path("/tmp/templtune-cache-x")
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    assert config.cuda_emulated()
    with config.scope(cuda_backend=None):
        assert not config.cuda_emulated()


def test_false_spelled_out_turns_a_default_on_knob_off(monkeypatch):
    # "false" used to count as on for the pin (only "0" turned it off)
    from templtune.runtime.allocator import retain_scratch_memory

    monkeypatch.setenv("TEMPLTUNE_RUNNER_PIN_MALLOC", "false")
    assert config.get("TEMPLTUNE_RUNNER_PIN_MALLOC") is False
    retain_scratch_memory.cache_clear()
    try:
        with config.scope(keep_scratch=False):
            assert retain_scratch_memory() is False
    finally:
        retain_scratch_memory.cache_clear()


def test_a_child_process_sees_the_scoped_knobs(monkeypatch) -> None:
    """Worker processes (the measurement pool) run under the knobs scoped here: a scoped value
    replaces the variable and its aliases, ``None`` unsets them, and the child reads back the
    same values."""
    import subprocess
    import sys

    monkeypatch.setenv("TVM_NUM_THREADS", "5")
    monkeypatch.setenv("TEMPLTUNE_DEBUG", "1")
    with config.scope(num_threads=3, debug=None, TEMPLTUNE_NO_TOPHUB=True,
                      TEMPLTUNE_REFERENCE_LOG_DIR=("/a", "/b")):
        env = config.child_environment(EXTRA="x")
    assert env["TEMPLTUNE_NUM_THREADS"] == "3" and "TVM_NUM_THREADS" not in env
    assert "TEMPLTUNE_DEBUG" not in env and env["EXTRA"] == "x"
    probe = ("from templtune import config; print(config.get('TEMPLTUNE_NUM_THREADS'), "
             "config.get('TEMPLTUNE_NO_TOPHUB'), config.get('TEMPLTUNE_DEBUG'), "
             "[str(p) for p in config.get('TEMPLTUNE_REFERENCE_LOG_DIR')])")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, check=True).stdout.split(maxsplit=3)
    assert out[:3] == ["3", "True", "False"] and out[3].strip() == "['/a', '/b']"
    assert config.child_environment()["TVM_NUM_THREADS"] == "5"  # outside the scope
