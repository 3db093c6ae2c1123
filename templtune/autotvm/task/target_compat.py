"""A thin seam from AutoTVM to :mod:`templtune.target`.

Everything here accepts a ``Target``, a target string or None; the facts (keys, model) come from
the Target, which is the only place that parses target strings.
"""

from __future__ import annotations

import contextlib
from typing import Any

from templtune.target import Target


def target_class() -> Any:
    """``templtune.target.Target``."""
    return Target


def as_target(t: Any) -> Any:
    """A Target for ``t`` (a string is parsed; a Target or None is returned as is)."""
    return Target(t) if isinstance(t, str) else t


def current_target(allow_none: bool = True) -> Any:
    """The target of the enclosing ``with Target(...)`` scope, or None."""
    return Target.current(allow_none=allow_none)


def target_scope(t: Any) -> contextlib.AbstractContextManager[Any]:
    """A context manager that makes ``t`` the current target (a no-op for None/plain objects)."""
    if t is not None and hasattr(t, "__enter__"):
        return t
    return contextlib.nullcontext(t)


def target_keys(t: Any) -> tuple[str, ...]:
    """The target's keys (``cuda`` -> ``("cuda", "gpu")``, ``llvm`` -> ``("cpu",)``)."""
    keys = getattr(t, "keys", None)
    if keys and not callable(keys):
        return tuple(str(k) for k in keys)
    return Target(str(t)).keys


def target_model(t: Any) -> str:
    """The ``-model=`` of a target, ``"unknown"`` if unset."""
    model = getattr(t, "model", None)
    if model is None:
        attrs = getattr(t, "attrs", None)
        if isinstance(attrs, dict):
            model = attrs.get("model")
    return str(model) if model else Target(str(t)).model
