"""The backend seam: code generators registered by target kind.

A :class:`Codegen` turns loop IR into source (``render``) and source into a picklable artifact
(``compile``); :mod:`templtune.runtime.registry` turns the artifact into a callable module, and
:func:`templtune.build` chains the two. Each backend registers itself beside its own code
(``@register_codegen("llvm")`` in :mod:`templtune.codegen.llvm.build`).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from templtune.errors import TargetError
from templtune.lower.ir import PrimFunc

__all__ = ["Codegen", "CODEGENS", "register_codegen", "get_codegen", "target_kind_name"]


class Codegen(ABC):
    """One backend's compiler half: loop IR -> source -> artifact."""

    #: the target kind this backend compiles for (``Target.kind`` name)
    kind: str = ""

    @abstractmethod
    def render(self, func: PrimFunc, target: Any, name: str | None = None) -> Any:
        """Source form of ``func`` (backend-specific: LLVM IR, CUDA C with launch shapes)."""

    @abstractmethod
    def compile(self, rendered: Any, target: Any,
                timings: dict[str, float] | None = None) -> Any:
        """A picklable artifact the runtime loader for :attr:`kind` accepts."""


CODEGENS: dict[str, Codegen] = {}

# NOTE: backends register on import; these are imported on first lookup so that importing the
# registry stays cheap and a kind's dependencies (llvmlite, nvcc) load only when it is used.
_BUILTIN: dict[str, str] = {
    "llvm": "templtune.codegen.llvm.build",
    "cuda": "templtune.codegen.cuda.build",
}

C = TypeVar("C", bound=type[Codegen])


def register_codegen(kind: str) -> Callable[[C], C]:
    """Class decorator: register one instance of the class as the codegen for ``kind``."""

    def deco(cls: C) -> C:
        cls.kind = kind
        CODEGENS[kind] = cls()
        return cls

    return deco


def target_kind_name(target: Any) -> str:
    """The kind of a Target as a string (``target.kind`` or ``target.kind.name``)."""
    kind = target.kind
    return str(getattr(kind, "name", kind))


def get_codegen(kind: str) -> Codegen:
    """The codegen registered for ``kind``.

    Raises
    ------
    TargetError
        No backend compiles for ``kind``.
    """
    if kind not in CODEGENS and kind in _BUILTIN:
        importlib.import_module(_BUILTIN[kind])
    try:
        return CODEGENS[kind]
    except KeyError:
        known = sorted(set(CODEGENS) | set(_BUILTIN))
        raise TargetError(f"cannot build for target kind {kind!r}; backends: "
                          f"{', '.join(known)}") from None
