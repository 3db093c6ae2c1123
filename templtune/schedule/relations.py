"""Iteration-variable relations of a stage and per-axis annotations.

A stage starts with its op's root axes as leaves; ``split``/``fuse`` replace leaves and record a
relation so that lowering can map leaf loop variables back to root indices (``PassUp``) and root
extents down to leaf extents (``PassDown``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templtune.te.expr import IterKind, IterVar, Range, Var, const


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    """``parent = outer * f + inner`` with ``f = factor`` (or ``ceil(extent / nparts)``)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None = None
    nparts: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Fuse:
    """``fused = outer * extent(inner) + inner``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Rebase:
    """``parent = rebased`` with ``rebased`` starting at 0 (used when an axis is re-rooted)."""

    parent: IterVar
    rebased: IterVar


Relation = Split | Fuse | Rebase


@dataclass(slots=True)
class IterVarAttr:
    """Annotations of one leaf axis: loop kind, thread binding, pragmas, prefetches."""

    kind: IterKind | None = None  # UNROLLED / VECTORIZED / PARALLELIZED
    bind_thread: IterVar | None = None
    pragmas: list[tuple[str, Any]] = field(default_factory=list)
    prefetch: list[tuple[Any, int]] = field(default_factory=list)  # (tensor, offset)


def new_iter_var(name: str, extent: int | None, iter_type: IterKind) -> IterVar:
    """A fresh IterVar ``name`` with domain ``[0, extent)`` (no domain when unknown)."""
    dom = None if extent is None else Range(const(0), const(extent))
    return IterVar(dom, Var(name, "int32"), iter_type)
