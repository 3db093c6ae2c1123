"""Scalar expression nodes shared by tensor expressions and loop IR.

Every node is a frozen, slotted dataclass with ``eq=False``: equality and hashing are by identity,
which is what loop variables need (two ``Var("i")`` are different variables) and keeps dict lookups
O(1) on deep trees. Structural comparison lives in :func:`templtune.te.functor.structural_equal`.

Python operators build expressions (``a + b``, ``a * 2``, ``a < b``, ``a == b``). As in TVM, the
truth value of ``a == b`` is identity (or value equality when both sides are constants), so nodes
stay usable as dict keys and in membership tests.

This module is the home of every expression name: iteration axes and reductions live in
:mod:`templtune.te.axis`, the construction helpers (``const``, ``convert``, ``binary``, ``cast``,
...) in :mod:`templtune.te.construct`, and both are re-exported here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from templtune.errors import DTypeError, ExprError

if TYPE_CHECKING:
    from templtune.te.tensor import Tensor


class PrimExpr:
    """Base of all scalar expressions. Subclasses define ``dtype``."""

    __slots__ = ()
    dtype: str

    # NOTE: arithmetic builds nodes without simplification, except that two constants fold, so
    # that shape arithmetic in templates (``n // 4``) stays constant.
    def __add__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.ADD, self, o)

    def __radd__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.ADD, o, self)

    def __sub__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.SUB, self, o)

    def __rsub__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.SUB, o, self)

    def __mul__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.MUL, self, o)

    def __rmul__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.MUL, o, self)

    def __truediv__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.DIV, self, o)

    def __rtruediv__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.DIV, o, self)

    def __floordiv__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.FLOORDIV, self, o)

    def __rfloordiv__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.FLOORDIV, o, self)

    def __mod__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.FLOORMOD, self, o)

    def __rmod__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.FLOORMOD, o, self)

    def __neg__(self) -> PrimExpr:
        return binary(BinOpKind.SUB, const(0, self.dtype), self)

    def __lt__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.LT, self, o)

    def __le__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.LE, self, o)

    def __gt__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.GT, self, o)

    def __ge__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.GE, self, o)

    def __and__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.AND, self, o)

    def __rand__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.AND, o, self)

    def __or__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.OR, self, o)

    def __ror__(self, o: ExprLike) -> PrimExpr:
        return binary(BinOpKind.OR, o, self)

    def __invert__(self) -> PrimExpr:
        return Not(self)

    def __int__(self) -> int:
        # NOTE: only constants convert (IntImm overrides this); declared here so that int() of
        # an expression type-checks and fails with a message naming the expression.
        raise TypeError(f"{self} is not a constant integer")

    # NOTE: as in TVM, ``a == b`` builds an EQ node (so ``te.if_then_else(i == j, ...)`` works),
    # while its truth value is identity (or value equality of two constants), so expressions
    # still behave as dict keys and in ``x in list`` tests.
    def __eq__(self, o: object) -> Any:
        if not isinstance(o, (PrimExpr, IterVar, int, float)):
            return NotImplemented
        try:
            return binary(BinOpKind.EQ, self, convert(o))
        except (DTypeError, ExprError):
            return NotImplemented

    def __ne__(self, o: object) -> Any:
        if not isinstance(o, (PrimExpr, IterVar, int, float)):
            return NotImplemented
        try:
            return binary(BinOpKind.NE, self, convert(o))
        except (DTypeError, ExprError):
            return NotImplemented

    def __bool__(self) -> bool:
        if isinstance(self, BinOp) and self.op in (BinOpKind.EQ, BinOpKind.NE):
            same = self.a is self.b
            return same if self.op is BinOpKind.EQ else not same
        raise ExprError(
            "a symbolic expression has no truth value; use te.all/te.any/if_then_else instead"
        )

    def astype(self, dtype: str) -> PrimExpr:
        return cast(dtype, self)

    def __str__(self) -> str:
        from templtune.te.printer import expr_str

        return expr_str(self)

    __repr__ = __str__

    __hash__ = object.__hash__


ExprLike = PrimExpr | int | float | bool


# ----------------------------------------------------------------------------------- leaves


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IntImm(PrimExpr):
    dtype: str
    value: int

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        return self.value != 0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class FloatImm(PrimExpr):
    dtype: str
    value: float

    def __float__(self) -> float:
        return self.value

    def __bool__(self) -> bool:
        return self.value != 0.0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class StringImm(PrimExpr):
    value: str
    dtype: str = "handle"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(PrimExpr):
    """A scalar variable (loop variable, shape variable). Identity matters, not the name."""

    name: str
    dtype: str = "int32"


# ---------------------------------------------------------------------------------- compound


class BinOpKind(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # true division for floats, truncated division for ints
    FLOORDIV = "//"
    FLOORMOD = "%"
    MIN = "min"
    MAX = "max"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "&&"
    OR = "||"


COMPARE_OPS = frozenset({BinOpKind.EQ, BinOpKind.NE, BinOpKind.LT, BinOpKind.LE, BinOpKind.GT,
                         BinOpKind.GE})
LOGIC_OPS = frozenset({BinOpKind.AND, BinOpKind.OR})


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class BinOp(PrimExpr):
    """``a <op> b``. Comparison and logic ops have dtype ``bool`` (with the operands' lanes)."""

    op: BinOpKind
    a: PrimExpr
    b: PrimExpr
    dtype: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Not(PrimExpr):
    a: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Select(PrimExpr):
    """``cond ? t : f``. With ``guarded`` (``if_then_else``) only the taken branch is evaluated,
    so it may contain loads that are out of bounds when not taken (padding); otherwise both
    branches are evaluated (``select``)."""

    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    guarded: bool = False

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.true_value.dtype


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(PrimExpr):
    """An intrinsic call by name: ``exp, log, sqrt, tanh, sigmoid, fabs, floor, ceil, pow,
    likely, tvm_storage_sync, ...``."""

    dtype: str
    name: str
    args: tuple[PrimExpr, ...]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TensorLoad(PrimExpr):
    """``tensor[indices]`` inside a compute body (TVM's ProducerLoad)."""

    tensor: Tensor
    indices: tuple[PrimExpr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.tensor.dtype


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Range:
    """``[min, min + extent)``."""

    min: PrimExpr
    extent: PrimExpr

    @staticmethod
    def from_min_extent(mn: ExprLike, extent: ExprLike) -> Range:
        return Range(convert(mn), convert(extent))

    def __repr__(self) -> str:
        return f"range(min={self.min}, ext={self.extent})"


# NOTE: imported last: the classes above call these only at run time, while the two modules
# subclass and build those classes. ``templtune.te`` imports this module before any other.
from templtune.te.axis import CommReducer, IterKind, IterVar, Reduce  # noqa: E402
from templtune.te.construct import (  # noqa: E402
    _fold,  # noqa: F401  (private, kept importable from here)
    _unify,  # noqa: F401
    binary,
    cast,
    const,
    const_int,
    convert,
    equal,
    not_equal,
)

__all__ = [
    "PrimExpr", "ExprLike", "IntImm", "FloatImm", "StringImm", "Var", "BinOpKind", "COMPARE_OPS",
    "LOGIC_OPS", "BinOp", "Not", "Cast", "Select", "Call", "TensorLoad", "Range", "IterKind",
    "IterVar", "CommReducer", "Reduce", "const", "convert", "binary", "cast", "equal",
    "not_equal", "const_int",
]
