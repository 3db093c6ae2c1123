"""Building expressions: constants, conversion, dtype unification and constant folding.

These are what the operators of :class:`~templtune.te.expr.PrimExpr` call; they live apart from
the node classes so that the node definitions read on their own. Every name here is re-exported
from :mod:`templtune.te.expr`.
"""

from __future__ import annotations

from typing import Any

from templtune import dtype as dt
from templtune.errors import DTypeError, ExprError
from templtune.te.axis import IterVar
from templtune.te.expr import (
    COMPARE_OPS,
    LOGIC_OPS,
    BinOp,
    BinOpKind,
    Cast,
    ExprLike,
    FloatImm,
    IntImm,
    PrimExpr,
)

__all__ = ["const", "convert", "binary", "cast", "equal", "not_equal", "const_int"]


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
