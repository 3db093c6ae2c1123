"""Extents down and index values up through split/fuse/rebase relations (TVM's message_passing)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from templtune.schedule.relations import Fuse, Split
from templtune.te.expr import IterVar, PrimExpr, const


def _children(rel: Any) -> tuple[IterVar, ...]:
    if isinstance(rel, Split):
        return (rel.outer, rel.inner)
    if isinstance(rel, Fuse):
        return (rel.fused,)
    return (rel.rebased,)


def _ceil_div(a: Any, b: Any) -> Any:
    """``ceil(a / b)``: an int for ints, ``floordiv(a + (b - 1), b)`` for symbolic extents."""
    if type(a) is int and type(b) is int:
        return -(-a // b)
    if _is_one(b):
        return a
    return (a + (b - 1)) // b


def _mul(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return a * b
    return b if type(a) is int and a == 1 else (a if type(b) is int and b == 1 else a * b)


def _is_one(x: Any) -> bool:
    return type(x) is int and x == 1


def _pass_down(rels: Iterable[Any], ext: dict[IterVar, Any]) -> None:
    """Fill ``ext`` with the extents of relation children from their parents' extents.

    Extents are ints, or expressions of the shape variables for symbolic shapes."""
    for rel in rels:
        if isinstance(rel, Split):
            pe = ext[rel.parent]
            if rel.factor is not None:
                ext[rel.inner] = rel.factor
                ext[rel.outer] = _ceil_div(pe, rel.factor)
            else:
                assert rel.nparts is not None
                ext[rel.outer] = rel.nparts
                ext[rel.inner] = _ceil_div(pe, rel.nparts)
        elif isinstance(rel, Fuse):
            ext[rel.fused] = _mul(ext[rel.outer], ext[rel.inner])
        else:
            ext[rel.rebased] = ext[rel.parent]


def _pass_up(rels: Sequence[Any], val: dict[IterVar, PrimExpr],
             ext: dict[IterVar, Any]) -> dict[IterVar, PrimExpr]:
    """Values of parents from values of leaves (``outer*f + inner``, ``fused // e``, ...)."""
    val = dict(val)
    for rel in reversed(rels):
        if isinstance(rel, Split):
            o, i = val[rel.outer], val[rel.inner]
            fac = ext[rel.inner]
            val[rel.parent] = o + i if _is_one(fac) else o * fac + i
        elif isinstance(rel, Fuse):
            f = val[rel.fused]
            ei = ext[rel.inner]
            val[rel.outer] = f if _is_one(ei) else f // ei
            val[rel.inner] = const(0) if _is_one(ei) else f % ei
        else:
            val[rel.parent] = val[rel.rebased]
    return val


def _may_exceed(rels: Sequence[Any], root: IterVar, ext: dict[IterVar, int]) -> bool:
    """Whether an uneven split below ``root`` lets the composed index pass its extent."""
    below: set[IterVar] = {root}
    for rel in rels:
        if isinstance(rel, Split) and rel.parent in below:
            below.update((rel.outer, rel.inner))
            eo, ei, ep = ext[rel.outer], ext[rel.inner], ext[rel.parent]
            if type(ep) is not int or eo * ei != ep:
                return True
        elif isinstance(rel, Fuse) and (rel.outer in below or rel.inner in below):
            below.add(rel.fused)
        elif not isinstance(rel, (Split, Fuse)) and rel.parent in below:
            below.add(rel.rebased)
    return False
