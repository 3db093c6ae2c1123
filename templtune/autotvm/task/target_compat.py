"""A thin seam to :mod:`templtune.target` (imported lazily: the target layer may be absent or
still importing when the autotvm modules load).

Everything here accepts a ``Target``, a target string or None.
"""

from __future__ import annotations

import contextlib
from typing import Any

_DEFAULT_KEYS = {
    "llvm": ("cpu",), "c": ("cpu",), "cuda": ("cuda", "gpu"), "nvptx": ("cuda", "gpu"),
    "rocm": ("rocm", "gpu"), "opencl": ("opencl", "gpu"), "vulkan": ("vulkan", "gpu"),
    "metal": ("metal", "gpu"),
}


class SimpleTarget:
    """Stand-in used only when :mod:`templtune.target` cannot be imported: parses ``kind``,
    ``-keys=`` and ``-model=`` of a target string and prints it back unchanged."""

    def __init__(self, text: str) -> None:
        self._text = " ".join(str(text).split())
        toks = self._text.split()
        if not toks:
            raise ValueError("empty target string")
        self.kind = toks[0]
        opts = dict(t[1:].split("=", 1) for t in toks[1:] if t.startswith("-") and "=" in t)
        keys = opts.get("keys")
        self.keys = tuple(keys.split(",")) if keys else _DEFAULT_KEYS.get(self.kind, (self.kind,))
        self.model = opts.get("model", "unknown")

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"SimpleTarget({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(self._text)


def target_class() -> Any:
    """``templtune.target.Target`` or None when the target layer is unavailable."""
    try:
        from templtune.target import Target
    except ImportError:
        return None
    return Target


def as_target(t: Any) -> Any:
    """A target object for ``t`` (a ``Target``, a string or None)."""
    if t is None or not isinstance(t, str):
        return t
    cls = target_class()
    return cls(t) if cls is not None else SimpleTarget(t)


def current_target(allow_none: bool = True) -> Any:
    """The target of the enclosing ``with Target(...)`` scope, or None."""
    cls = target_class()
    if cls is None or not hasattr(cls, "current"):
        return None
    return cls.current(allow_none=allow_none)


def target_scope(t: Any) -> contextlib.AbstractContextManager[Any]:
    """A context manager that makes ``t`` the current target (a no-op for None/plain objects)."""
    if t is not None and hasattr(t, "__enter__"):
        return t
    return contextlib.nullcontext(t)


def target_keys(t: Any) -> tuple[str, ...]:
    """The target's keys (``cuda`` -> ``("cuda", "gpu")``, ``llvm`` -> ``("cpu",)``)."""
    keys = getattr(t, "keys", None)
    if keys:
        return tuple(str(k) for k in keys)
    return SimpleTarget(str(t)).keys


def target_model(t: Any) -> str:
    """The ``-model=`` of a target, ``"unknown"`` if unset."""
    model = getattr(t, "model", None)
    if model is None:
        attrs = getattr(t, "attrs", None)
        if isinstance(attrs, dict):
            model = attrs.get("model")
    return str(model) if model else SimpleTarget(str(t)).model
