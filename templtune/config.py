"""Environment knobs: one typed table, read live, overridable per context for tests.

Every environment variable templtune reads is a :class:`Knob` in :data:`KNOBS`; code reads it
with :func:`get` (never ``os.environ``). Values are parsed the same way for every knob: booleans
accept ``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case); an empty variable counts as
unset; a value that does not parse is warned about once and treated as unset (then the knob's
aliases are tried, then its default).

The environment is read on every call, so ``monkeypatch.setenv`` and child processes see the
same values; :func:`scope` overrides knobs for the current context only (not in child processes).

Examples
--------
>>> from templtune import config
>>> with config.scope(num_threads=1):
...     config.get("TEMPLTUNE_NUM_THREADS")
1
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from templtune.errors import TempltuneError

__all__ = ["KNOBS", "ConfigError", "Knob", "KnobType", "child_environment", "cuda_emulated", "get",
           "markdown_table", "scope"]

log = logging.getLogger("templtune.config")


class ConfigError(TempltuneError, ValueError):
    """An unknown knob name, or a :func:`scope` override of the wrong type."""


class KnobType(enum.Enum):
    """How a knob's text is parsed."""

    BOOL = "bool"
    INT = "int"
    STR = "str"
    PATH = "path"
    #: an ``os.pathsep``-separated list of paths (a tuple of :class:`~pathlib.Path`)
    PATHS = "paths"


@dataclass(frozen=True, slots=True)
class Knob:
    """One environment variable: its name, type, default and meaning."""

    name: str
    type: KnobType
    default: Any
    doc: str
    #: read in order when ``name`` is unset (other tools' names for the same setting)
    aliases: tuple[str, ...] = ()
    #: allowed values of a STR knob (empty: any)
    choices: tuple[str, ...] = ()
    #: smallest allowed value of an INT knob
    minimum: int | None = None

    @property
    def short(self) -> str:
        """The keyword :func:`scope` accepts: ``TEMPLTUNE_NUM_THREADS`` -> ``num_threads``."""
        return self.name.removeprefix("TEMPLTUNE_").lower()


_B, _I, _S, _P, _PS = KnobType.BOOL, KnobType.INT, KnobType.STR, KnobType.PATH, KnobType.PATHS

KNOBS: tuple[Knob, ...] = (
    Knob("TEMPLTUNE_NUM_THREADS", _I, None,
         "Threads of parallel loops when the target has no `-num-cores` (default: all cores).",
         aliases=("TVM_NUM_THREADS",), minimum=1),
    Knob("TEMPLTUNE_DEBUG", _B, False,
         "Log the LLVM IR of every build (DEBUG level) and dump IR that fails to verify."),
    Knob("TEMPLTUNE_LIBGOMP", _P, None,
         "libgomp shared library for parallel loops (default: the copy the xgboost-cpu wheel "
         "bundles, then xgboost's or scikit-learn's, then the system's)."),
    Knob("TEMPLTUNE_THREAD_POOL", _S, "templtune",
         "Threads of parallel loops: `templtune` (its own pool: the caller never waits for a "
         "worker that has not started, x86-64 Linux) or `gomp` (libgomp's `GOMP_parallel`, "
         "whose end barrier waits for every worker). Read when a kernel is built.",
         choices=("templtune", "gomp")),
    Knob("TEMPLTUNE_POOL_SPIN", _I, 20000,
         "Pauses a worker of templtune's pool spins waiting for the next parallel call before "
         "it sleeps (read when the pool starts).", minimum=0),
    Knob("TEMPLTUNE_BIND_THREADS", _B, False,
         "Pin each worker thread of parallel loops to its own CPU (the calling thread stays "
         "unpinned), so a woken worker does not queue behind its caller; for processes whose "
         "other thread pools do not pin to the same CPUs. Read when the pool (or libgomp) "
         "starts, ignored where OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY is set."),
    Knob("TEMPLTUNE_AUTOTVM_STRICT", _B, False,
         "A dispatch miss (no tuned config for a workload) raises instead of using a fallback."),
    Knob("TEMPLTUNE_NO_TOPHUB", _B, False,
         "Do not fall back to the pre-tuned reference logs shipped with the templates."),
    Knob("TEMPLTUNE_REFERENCE_LOG_DIR", _PS, (),
         "Extra directories of reference logs (`os.pathsep`-separated), searched first."),
    Knob("TEMPLTUNE_RUNNER_PIN_MALLOC", _B, True,
         "The measurement process raises glibc's mmap/trim thresholds, so scratch buffers are "
         "not page-faulted in on every timed call."),
    Knob("TEMPLTUNE_KEEP_SCRATCH", _B, True,
         "Loading a module raises glibc's mmap/trim thresholds (freed scratch memory stays "
         "mapped)."),
    Knob("TEMPLTUNE_CUDA_BACKEND", _S, None,
         "CUDA runtime: `pycuda`, `cuda-python` or `emulator` (CPU emulation; default: the "
         "first real runtime that loads, else the emulator with one warning; a real runtime "
         "named here that cannot load is an error)."),
    Knob("TEMPLTUNE_CUDA_EMULATOR", _S, "llvm",
         "Emulator mode: `llvm` (kernels compiled for the host, fast) or `lockstep` "
         "(race-checking interpreter, slow).", choices=("lockstep", "llvm")),
    Knob("TEMPLTUNE_CUDA_EMULATOR_TIMEOUT_SCALE", _I, 20,
         "On the CPU emulator, CUDA candidates' build and run timeouts are multiplied by this: "
         "the timeouts a user sets are GPU budgets, and emulated kernels run far slower.",
         minimum=1),
    Knob("TEMPLTUNE_CUDA_CACHE", _P, None,
         "Directory of the nvcc compile cache (default: `~/.cache/templtune/cuda`)."),
    Knob("CUDA_HOME", _P, None, "CUDA toolkit root searched for `nvcc` when it is not on `PATH`."),
    Knob("CUDA_PATH", _P, None, "Second CUDA toolkit root searched for `nvcc` (after `CUDA_HOME`)."),
    Knob("CC", _S, None,
         "C compiler that `Module.save` writes object files with (default: `gcc`, `cc` or "
         "`clang` from `PATH`)."),
    Knob("CXX", _S, None,
         "C compiler that `export_library` links shared libraries with (default: `g++`, `gcc` "
         "or `cc` from `PATH`)."),
    Knob("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", _S, None,
         "Ray's own switch; `RPCRunner` sets it to `0` while it starts a local Ray instance, so "
         "that every Ray port listens on 127.0.0.1 only (not a user setting)."),
    Knob("OMP_PROC_BIND", _S, None,
         "libgomp's thread binding (read by libgomp when templtune loads it); when set, or "
         "`OMP_PLACES` or `GOMP_CPU_AFFINITY` is, templtune leaves binding to it. Otherwise "
         "templtune sets it and `OMP_PLACES` for that load only (see `TEMPLTUNE_BIND_THREADS`)."),
    Knob("OMP_PLACES", _S, None, "libgomp's places (see `OMP_PROC_BIND`)."),
    Knob("GOMP_CPU_AFFINITY", _S, None, "libgomp's CPU list (see `OMP_PROC_BIND`)."),
    Knob("XDG_CACHE_HOME", _P, None,
         "Base of templtune's cache folder (`$XDG_CACHE_HOME/templtune`; default `~/.cache`)."),
    Knob("TEMPLTUNE_WORKER_TMPDIR", _P, None,
         "Set by the worker pool for each worker: its temporary folder, removed with it (not a "
         "user setting)."),
    Knob("TEMPLTUNE_HYP_SCALE", _I, 1,
         "Tests: multiplies the number of hypothesis examples of the simplifier tests.",
         minimum=1),
    Knob("TEMPLTUNE_TEST_REAL_GPU", _B, False,
         "Tests: measure CUDA tests on the real GPU instead of the emulator."),
)

_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
_BY_SHORT: dict[str, Knob] = {k.short: k for k in KNOBS}
_OVERRIDES: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "templtune_config_overrides", default=MappingProxyType({}))
_WARNED: set[tuple[str, str]] = set()
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _knob(name: str) -> Knob:
    knob = _BY_NAME.get(name) or _BY_SHORT.get(name.lower())
    if knob is None:
        raise ConfigError(f"unknown configuration knob {name!r}; known: "
                          f"{', '.join(sorted(_BY_NAME))}")
    return knob


class _Invalid(Exception):
    pass


def _parse(knob: Knob, text: str) -> Any:
    t = text.strip()
    if knob.type is KnobType.BOOL:
        if t.lower() in _TRUE:
            return True
        if t.lower() in _FALSE:
            return False
        raise _Invalid("expected 1/0, true/false, yes/no or on/off")
    if knob.type is KnobType.INT:
        try:
            v = int(t)
        except ValueError:
            raise _Invalid("expected an integer") from None
        if knob.minimum is not None and v < knob.minimum:
            raise _Invalid(f"expected an integer >= {knob.minimum}")
        return v
    if knob.type is KnobType.PATH:
        return Path(t).expanduser()
    if knob.type is KnobType.PATHS:
        return tuple(Path(p).expanduser() for p in t.split(os.pathsep) if p)
    if knob.choices and t not in knob.choices:
        raise _Invalid(f"expected one of {', '.join(knob.choices)}")
    return t


def _check_override(knob: Knob, value: Any) -> Any:
    if value is None:
        return None
    kinds: dict[KnobType, tuple[type, ...]] = {
        KnobType.BOOL: (bool,), KnobType.INT: (int,), KnobType.STR: (str,),
        KnobType.PATH: (str, os.PathLike), KnobType.PATHS: (tuple, list)}
    ok = isinstance(value, kinds[knob.type]) and not (
        knob.type is KnobType.INT and isinstance(value, bool))
    if not ok:
        raise ConfigError(f"{knob.name} takes a {knob.type.value}, got {value!r}")
    if knob.type is KnobType.PATH:
        return Path(value)
    if knob.type is KnobType.PATHS:
        return tuple(Path(p) for p in value)
    if knob.choices and value not in knob.choices:
        raise ConfigError(f"{knob.name} must be one of {', '.join(knob.choices)}, got {value!r}")
    if knob.minimum is not None and value < knob.minimum:
        raise ConfigError(f"{knob.name} must be >= {knob.minimum}, got {value!r}")
    return value


def get(name: str) -> Any:
    """The value of knob ``name`` (its variable name, or the :attr:`Knob.short` keyword).

    Raises
    ------
    ConfigError
        When ``name`` is not in :data:`KNOBS`.
    """
    knob = _knob(name)
    overrides = _OVERRIDES.get()
    if knob.name in overrides:
        value = overrides[knob.name]
        return knob.default if value is None else value
    for var in (knob.name, *knob.aliases):
        text = os.environ.get(var, "")
        if not text.strip():
            continue
        try:
            return _parse(knob, text)
        except _Invalid as e:
            if (var, text) not in _WARNED:
                _WARNED.add((var, text))
                log.warning("ignoring %s=%r (%s)", var, text, e)
    return knob.default


@contextlib.contextmanager
def scope(**overrides: Any) -> Iterator[None]:
    """Override knobs for the ``with`` block in this context (``None``: as if unset).

    Keywords are knob names or their short forms: ``scope(TEMPLTUNE_DEBUG=True)`` or
    ``scope(debug=True)``.

    Raises
    ------
    ConfigError
        An unknown knob or a value of the wrong type.
    """
    new = dict(_OVERRIDES.get())
    for key, value in overrides.items():
        knob = _knob(key)
        new[knob.name] = _check_override(knob, value)
    token = _OVERRIDES.set(new)
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def cuda_emulated() -> bool:
    """Whether CUDA modules run on the CPU emulator (``TEMPLTUNE_CUDA_BACKEND=emulator``)."""
    return bool(get("TEMPLTUNE_CUDA_BACKEND") == "emulator")


def _text(knob: Knob, value: Any) -> str:
    """The environment text :func:`_parse` reads back as ``value``."""
    if knob.type is KnobType.BOOL:
        return "1" if value else "0"
    if knob.type is KnobType.PATHS:
        return os.pathsep.join(os.fspath(p) for p in value)
    return os.fspath(value) if knob.type is KnobType.PATH else str(value)


def child_environment(**overrides: str) -> dict[str, str]:
    """The environment of a child process: this one's, with the knobs :func:`scope` overrides
    here (so a worker process runs under the same settings), then ``overrides`` (the one place
    the environment is copied, so the knob table stays the only reader)."""
    env = dict(os.environ)
    for name, value in _OVERRIDES.get().items():
        knob = _knob(name)
        for var in (knob.name, *knob.aliases):
            env.pop(var, None)
        if value is not None:
            env[knob.name] = _text(knob, value)
    env.update(overrides)
    return env


@contextlib.contextmanager
def process_environment(**values: str) -> Iterator[None]:
    """Set declared variables in this process's environment for the ``with`` block, for a
    library that reads them itself and passes them to the processes it starts (restored after).

    Raises
    ------
    ConfigError
        A variable that is not a declared knob.
    """
    names = [_knob(k).name for k in values]
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update({n: str(v) for n, v in zip(names, values.values())})
    try:
        yield
    finally:
        for n, old in saved.items():
            if old is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = old


def markdown_table() -> str:
    """The README's table of knobs (one row per entry of :data:`KNOBS`)."""
    rows = ["| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for k in KNOBS:
        default = "unset" if k.default in (None, ()) else (
            ("1" if k.default else "0") if isinstance(k.default, bool) else str(k.default))
        also = f" (also read: {', '.join(f'`{a}`' for a in k.aliases)})" if k.aliases else ""
        rows.append(f"| `{k.name}` | {k.type.value} | {default} | {k.doc}{also} |")
    return "\n".join(rows)
