"""Iteration axes and the reduction node: ``IterKind``, ``IterVar``, ``CommReducer``, ``Reduce``.

Separate from :mod:`templtune.te.expr` (which re-exports every name here) because an axis is not
a scalar expression: it pairs a :class:`~templtune.te.expr.Var` with a domain and a role, and the
reduction node is built from axes and a combiner rather than from scalar operands.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from templtune.te.expr import ExprLike, PrimExpr, Range, Var

__all__ = ["IterKind", "IterVar", "CommReducer", "Reduce"]


class IterKind(enum.Enum):
    DATA_PAR = 0
    REDUCE = 2
    ORDERED = 3
    OPAQUE = 4
    UNROLLED = 5
    VECTORIZED = 6
    PARALLELIZED = 7
    TENSORIZED = 8
    THREAD_INDEX = 1


@dataclass(frozen=True, slots=True, eq=False)
class IterVar:
    """An iteration axis of a compute: a variable with a domain. ``thread_tag`` is set for
    ``te.thread_axis`` ("blockIdx.x", "threadIdx.y", "vthread", ...)."""

    dom: Range | None
    var: Var
    iter_type: IterKind = IterKind.DATA_PAR
    thread_tag: str = ""

    def __repr__(self) -> str:
        return f"iter_var({self.var.name}, {self.dom!r})"

    @property
    def extent(self) -> PrimExpr | None:
        return None if self.dom is None else self.dom.extent

    # IterVars are used directly in index expressions (``A[i, k]``), as in TVM.
    def _e(self) -> Var:
        return self.var

    def __add__(self, o: ExprLike) -> PrimExpr:
        return self.var + o

    def __radd__(self, o: ExprLike) -> PrimExpr:
        return o + self.var  # type: ignore[operator]

    def __sub__(self, o: ExprLike) -> PrimExpr:
        return self.var - o

    def __rsub__(self, o: ExprLike) -> PrimExpr:
        return o - self.var  # type: ignore[operator]

    def __mul__(self, o: ExprLike) -> PrimExpr:
        return self.var * o

    def __rmul__(self, o: ExprLike) -> PrimExpr:
        return o * self.var  # type: ignore[operator]

    def __floordiv__(self, o: ExprLike) -> PrimExpr:
        return self.var // o

    def __mod__(self, o: ExprLike) -> PrimExpr:
        return self.var % o

    def __lt__(self, o: ExprLike) -> PrimExpr:
        return self.var < o

    def __le__(self, o: ExprLike) -> PrimExpr:
        return self.var <= o

    def __gt__(self, o: ExprLike) -> PrimExpr:
        return self.var > o

    def __ge__(self, o: ExprLike) -> PrimExpr:
        return self.var >= o

    def __neg__(self) -> PrimExpr:
        return -self.var

    # NOTE: every IterVar owns a fresh Var, so the identity-based truth value of ``iv == other``
    # (see PrimExpr.__eq__) is the identity of the IterVars themselves.
    def __eq__(self, o: object) -> Any:
        if not isinstance(o, (PrimExpr, IterVar, int, float)):
            return NotImplemented
        return self.var == (o.var if isinstance(o, IterVar) else o)

    def __ne__(self, o: object) -> Any:
        if not isinstance(o, (PrimExpr, IterVar, int, float)):
            return NotImplemented
        return self.var != (o.var if isinstance(o, IterVar) else o)

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True, eq=False)
class CommReducer:
    """A commutative reducer: ``result(lhs, rhs)`` with ``identity``. Multi-value reducers (argmax)
    have several lhs/rhs/result entries."""

    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[PrimExpr, ...]
    identity: tuple[PrimExpr, ...]
    name: str = "reducer"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Reduce(PrimExpr):
    """A reduction over ``axis`` of ``source`` with ``combiner``; allowed only as the top of a
    compute body."""

    combiner: CommReducer
    source: tuple[PrimExpr, ...]
    axis: tuple[IterVar, ...]
    condition: PrimExpr
    value_index: int = 0
    init: tuple[PrimExpr, ...] = field(default=())

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.source[self.value_index].dtype
