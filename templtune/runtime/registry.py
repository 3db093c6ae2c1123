"""The runtime half of the backend seam: loaders from a codegen artifact to a callable module.

Each runtime registers its loader beside its module class (``@register_loader("llvm")`` in
:mod:`templtune.runtime.module`); :func:`templtune.build` looks one up by the target kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from templtune.errors import TargetError

__all__ = ["LOADERS", "register_loader", "get_loader"]

Loader = Callable[[Any], Any]

LOADERS: dict[str, Loader] = {}

# NOTE: loaders register on import; imported on first lookup (see codegen.registry._BUILTIN).
_BUILTIN: dict[str, str] = {
    "llvm": "templtune.runtime.module",
    "cuda": "templtune.runtime.cuda.module",
}


def register_loader(kind: str) -> Callable[[Loader], Loader]:
    """Decorator: register ``fn(artifact) -> module`` as the loader for target ``kind``."""

    def deco(fn: Loader) -> Loader:
        LOADERS[kind] = fn
        return fn

    return deco


def get_loader(kind: str) -> Loader:
    """The loader registered for ``kind``.

    Raises
    ------
    TargetError
        No runtime loads modules of ``kind``.
    """
    if kind not in LOADERS and kind in _BUILTIN:
        importlib.import_module(_BUILTIN[kind])
    try:
        return LOADERS[kind]
    except KeyError:
        raise TargetError(f"no runtime loads modules for target kind {kind!r}") from None
