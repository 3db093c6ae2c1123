"""Scalar expression nodes shared by tensor expressions and loop IR.

Every node is a frozen, slotted dataclass with ``eq=False``: equality and hashing are by identity,
which is what loop variables need (two ``Var("i")`` are different variables) and keeps dict lookups
O(1) on deep trees. Structural comparison lives in :func:`templtune.te.functor.structural_equal`.

Python operators build expressions (``a + b``, ``a * 2``, ``a < b``, ``a == b``). As in TVM, the
truth value of ``a == b`` is identity (or value equality when both sides are constants), so nodes
stay usable as dict keys and in membership tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from templtune import dtype as dt
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


# ------------------------------------------------------------------------------ construction


def const(value: int | float | bool, dtype: str | None = None) -> PrimExpr:
    """A constant of ``dtype`` (default: int32 for ints, float32 for floats, bool for bools)."""
    if type(value) is int and (dtype == "int32" or (dtype is None and -(2**31) <= value < 2**31)):
        return IntImm("int32", value)  # NOTE: the commonest case, without parsing the dtype
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -(2**31) <= value < 2**31 else "int64"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise ExprError(f"cannot make a constant from {value!r}")
    d = dt.parse(dtype)
    if d.code == "float":
        return FloatImm(dtype, float(value))
    if d.code == "bool":
        return IntImm(dtype, int(bool(value)))
    if d.code in ("int", "uint"):
        if isinstance(value, float) and not value.is_integer():
            raise ExprError(f"{value!r} is not an integer constant of dtype {dtype}")
        return IntImm(dtype, int(value))
    raise DTypeError(f"cannot make a constant of dtype {dtype!r}")


def convert(x: Any) -> PrimExpr:
    """Turn a Python number, an IterVar or a PrimExpr into a PrimExpr."""
    if isinstance(x, PrimExpr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, (bool, int, float)):
        return const(x)
    import numpy as np

    if isinstance(x, np.generic):
        return const(x.item(), str(x.dtype))
    raise ExprError(f"cannot convert {type(x).__name__} {x!r} to an expression")


def _unify(a: PrimExpr, b: PrimExpr, a_py: bool, b_py: bool) -> tuple[PrimExpr, PrimExpr]:
    """Match operand dtypes: a Python literal takes the other side's dtype; int meets float → float."""
    if a.dtype == b.dtype:
        return a, b
    if a_py and isinstance(a, (IntImm, FloatImm)):
        return const(a.value, b.dtype if not (dt.is_int(b.dtype) and isinstance(a, FloatImm))
                     else "float32"), b
    if b_py and isinstance(b, (IntImm, FloatImm)):
        return a, const(b.value, a.dtype if not (dt.is_int(a.dtype) and isinstance(b, FloatImm))
                        else "float32")
    da, db = dt.parse(a.dtype), dt.parse(b.dtype)
    if da.lanes != db.lanes:
        raise DTypeError(f"operands have different lanes: {a.dtype} vs {b.dtype}")
    if da.code == "float" and db.code != "float":
        return a, Cast(a.dtype, b)
    if db.code == "float" and da.code != "float":
        return Cast(b.dtype, a), b
    if da.code == db.code or {da.code, db.code} <= {"int", "uint", "bool"}:
        wide = a.dtype if da.bits >= db.bits else b.dtype
        return (a if a.dtype == wide else Cast(wide, a)), (b if b.dtype == wide else Cast(wide, b))
    raise DTypeError(f"cannot combine dtypes {a.dtype} and {b.dtype}")


def _fold(op: BinOpKind, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    if not (isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm))):
        return None
    x, y = a.value, b.value
    is_i = isinstance(a, IntImm) and isinstance(b, IntImm)
    if op in (BinOpKind.DIV, BinOpKind.FLOORDIV, BinOpKind.FLOORMOD) and y == 0:
        raise ExprError(f"division by zero in constant expression {x} {op.value} {y}")
    r: Any
    if op is BinOpKind.ADD:
        r = x + y
    elif op is BinOpKind.SUB:
        r = x - y
    elif op is BinOpKind.MUL:
        r = x * y
    elif op is BinOpKind.DIV:
        r = (abs(x) // abs(y)) * (1 if (x >= 0) == (y >= 0) else -1) if is_i else x / y
    elif op is BinOpKind.FLOORDIV:
        r = x // y if is_i else float(x // y)
    elif op is BinOpKind.FLOORMOD:
        r = x % y
    elif op is BinOpKind.MIN:
        r = min(x, y)
    elif op is BinOpKind.MAX:
        r = max(x, y)
    else:
        cmp = {BinOpKind.EQ: x == y, BinOpKind.NE: x != y, BinOpKind.LT: x < y,
               BinOpKind.LE: x <= y, BinOpKind.GT: x > y, BinOpKind.GE: x >= y,
               BinOpKind.AND: bool(x) and bool(y), BinOpKind.OR: bool(x) or bool(y)}
        return const(bool(cmp[op]), "bool")
    return const(r, a.dtype)


def binary(op: BinOpKind, a: ExprLike, b: ExprLike) -> PrimExpr:
    """Build ``a <op> b`` with dtype unification and constant folding of two constants."""
    a_py, b_py = not isinstance(a, (PrimExpr, IterVar)), not isinstance(b, (PrimExpr, IterVar))
    ea, eb = _unify(convert(a), convert(b), a_py, b_py)
    folded = _fold(op, ea, eb)
    if folded is not None:
        return folded
    if op in COMPARE_OPS or op in LOGIC_OPS:
        out = dt.with_lanes("bool", dt.lanes(ea.dtype))
    else:
        out = ea.dtype
    return BinOp(op, ea, eb, out)


def cast(dtype: str, value: ExprLike) -> PrimExpr:
    dt.parse(dtype)
    v = convert(value)
    if v.dtype == dtype:
        return v
    if isinstance(v, (IntImm, FloatImm)):
        return const(int(v.value) if dt.is_int(dtype) else v.value, dtype)
    return Cast(dtype, v)


def equal(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOpKind.EQ, a, b)


def not_equal(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOpKind.NE, a, b)


def const_int(e: Any) -> int | None:
    """The Python int of a constant integer expression, else None."""
    if isinstance(e, bool):
        return int(e)
    if isinstance(e, int):
        return e
    if isinstance(e, IntImm):
        return e.value
    return None
