"""Elementwise intrinsics and helpers: math calls, selects, casts, floor division, all/any."""

from __future__ import annotations

from typing import Any

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.expr import (
    BinOpKind,
    Call,
    PrimExpr,
    Select,
    binary,
    const,
    convert,
)
from templtune.te.expr import cast as _cast

__all__ = ["exp", "log", "sqrt", "tanh", "sigmoid", "abs", "floordiv", "floormod", "cast",
           "if_then_else", "select", "all", "any", "power", "floor", "ceil", "likely",
           "truncdiv", "erf"]


def _float_call(name: str, x: Any) -> PrimExpr:
    e = convert(x)
    if not dt.is_float(e.dtype):
        e = _cast("float32", e)
    return Call(e.dtype, name, (e,))


def exp(x: Any) -> PrimExpr:
    """``e**x``."""
    return _float_call("exp", x)


def log(x: Any) -> PrimExpr:
    return _float_call("log", x)


def sqrt(x: Any) -> PrimExpr:
    return _float_call("sqrt", x)


def tanh(x: Any) -> PrimExpr:
    return _float_call("tanh", x)


def sigmoid(x: Any) -> PrimExpr:
    return _float_call("sigmoid", x)


def floor(x: Any) -> PrimExpr:
    return _float_call("floor", x)


def ceil(x: Any) -> PrimExpr:
    return _float_call("ceil", x)


def erf(x: Any) -> PrimExpr:
    return _float_call("erf", x)


def power(x: Any, y: Any) -> PrimExpr:
    a, b = convert(x), convert(y)
    if not dt.is_float(a.dtype):
        a = _cast("float32", a)
    return Call(a.dtype, "pow", (a, _cast(a.dtype, b)))


def abs(x: Any) -> PrimExpr:  # noqa: A001
    """Absolute value (``fabs`` for floats, a select for integers)."""
    e = convert(x)
    if dt.is_float(e.dtype):
        return Call(e.dtype, "fabs", (e,))
    if dt.parse(e.dtype).code in ("uint", "bool"):
        return e
    return Select(e >= 0, e, -e)


def likely(cond: Any) -> PrimExpr:
    c = convert(cond)
    return Call(c.dtype, "likely", (c,))


def floordiv(a: Any, b: Any) -> PrimExpr:
    return binary(BinOpKind.FLOORDIV, a, b)


def floormod(a: Any, b: Any) -> PrimExpr:
    return binary(BinOpKind.FLOORMOD, a, b)


def truncdiv(a: Any, b: Any) -> PrimExpr:
    return binary(BinOpKind.DIV, a, b)


def cast(value: Any, dtype: str) -> PrimExpr:
    """Cast ``value`` to ``dtype`` (TVM's argument order: value first)."""
    if isinstance(value, str) and not isinstance(dtype, str):  # tolerate cast(dtype, value)
        value, dtype = dtype, value
    return _cast(dtype, value)


def _cond(c: Any) -> PrimExpr:
    e = convert(c)
    if not dt.is_bool(e.dtype):
        raise ExprError(f"condition {e} has dtype {e.dtype}, expected bool")
    return e


def _branches(t: Any, f: Any) -> tuple[PrimExpr, PrimExpr]:
    t_py, f_py = not isinstance(t, PrimExpr), not isinstance(f, PrimExpr)
    te_, fe = convert(t), convert(f)
    if te_.dtype != fe.dtype:
        if f_py and not t_py:
            fe = const(fe.value, te_.dtype) if hasattr(fe, "value") else _cast(te_.dtype, fe)
        elif t_py and not f_py:
            te_ = const(te_.value, fe.dtype) if hasattr(te_, "value") else _cast(fe.dtype, te_)
        else:
            raise ExprError(f"branches have different dtypes: {te_.dtype} vs {fe.dtype}")
    return te_, fe


def if_then_else(cond: Any, t: Any, f: Any) -> PrimExpr:
    """``cond ? t : f`` evaluating only the taken branch (safe for out-of-bounds loads, e.g.
    padding)."""
    a, b = _branches(t, f)
    return Select(_cond(cond), a, b, guarded=True)


def select(cond: Any, t: Any, f: Any) -> PrimExpr:
    """``cond ? t : f`` with both branches evaluated."""
    a, b = _branches(t, f)
    return Select(_cond(cond), a, b, guarded=False)


def all(*conds: Any) -> PrimExpr:  # noqa: A001
    """Logical and of all arguments (``te.all(a, b, c)``)."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return const(True)
    out = _cond(conds[0])
    for c in conds[1:]:
        out = binary(BinOpKind.AND, out, _cond(c))
    return out


def any(*conds: Any) -> PrimExpr:  # noqa: A001
    """Logical or of all arguments."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return const(False)
    out = _cond(conds[0])
    for c in conds[1:]:
        out = binary(BinOpKind.OR, out, _cond(c))
    return out
