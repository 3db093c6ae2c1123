"""AutoTVM environment switches, held in a context variable (no process-global mutable state).

* ``in_tuning``: set by ``Tuner.tune`` while it runs;
* ``silent``: suppress the fallback warning;
* ``strict``: a dispatch miss raises :class:`ConfigNotFoundError` instead of using a fallback
  config (also on with the environment variable ``TEMPLTUNE_AUTOTVM_STRICT=1``);
* ``use_reference_logs``: let fallback configs consult pre-tuned reference logs (off with
  ``TEMPLTUNE_NO_TOPHUB=1``).

Worker processes get the parent's switches by passing :func:`snapshot` to :func:`restore` in
their initializer. ``GLOBAL_SCOPE`` keeps TVM's attribute spelling
(``autotvm.GLOBAL_SCOPE.silent = True``); assigning through it changes the current context.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from templtune import config


@dataclass(frozen=True, slots=True)
class AutotvmEnv:
    """The switches; see the module docstring."""

    in_tuning: bool = False
    silent: bool = False
    strict: bool = False
    use_reference_logs: bool = True


# NOTE: the default is a frozen dataclass, so sharing it is safe.
_ENV: ContextVar[AutotvmEnv] = ContextVar("templtune_autotvm_env", default=AutotvmEnv())  # noqa: B039


def current() -> AutotvmEnv:
    """The switches of the current context."""
    return _ENV.get()


def snapshot() -> AutotvmEnv:
    """A picklable copy of the current switches (for worker initializers)."""
    return _ENV.get()


def restore(env: AutotvmEnv) -> None:
    """Make ``env`` the switches of the current context (worker side of :func:`snapshot`)."""
    _ENV.set(env)


def configure(**changes: Any) -> AutotvmEnv:
    """Change switches in the current context; returns the previous switches."""
    old = _ENV.get()
    _ENV.set(dataclasses.replace(old, **changes))
    return old


@contextlib.contextmanager
def scope(**changes: Any) -> Iterator[AutotvmEnv]:
    """``with env.scope(strict=True): ...`` changes switches for the block only."""
    token = _ENV.set(dataclasses.replace(_ENV.get(), **changes))
    try:
        yield _ENV.get()
    finally:
        _ENV.reset(token)


def strict_enabled() -> bool:
    """True when dispatch misses must raise (switch or ``TEMPLTUNE_AUTOTVM_STRICT=1``)."""
    return _ENV.get().strict or bool(config.get("TEMPLTUNE_AUTOTVM_STRICT"))


def reference_logs_enabled() -> bool:
    """True unless reference logs are switched off (switch or ``TEMPLTUNE_NO_TOPHUB=1``)."""
    return _ENV.get().use_reference_logs and not config.get("TEMPLTUNE_NO_TOPHUB")


def set_use_reference_logs(enabled: bool) -> None:
    """Turn reference-log fallback on or off in the current context."""
    configure(use_reference_logs=bool(enabled))


class _GlobalScope:
    """TVM-style attribute access to the current switches."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name in AutotvmEnv.__dataclass_fields__:
            return getattr(_ENV.get(), name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in AutotvmEnv.__dataclass_fields__:
            raise AttributeError(f"unknown autotvm switch {name!r}")
        configure(**{name: value})

    def __repr__(self) -> str:
        return f"GLOBAL_SCOPE({_ENV.get()})"


GLOBAL_SCOPE = _GlobalScope()
