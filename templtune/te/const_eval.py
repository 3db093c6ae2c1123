"""Evaluate a scalar expression at one point (Python numbers): the oracle for simplifier and bound
tests, and a helper for constant shape arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    FloatImm,
    IntImm,
    IterVar,
    Not,
    PrimExpr,
    Select,
    TensorLoad,
    Var,
)

__all__ = ["eval_const"]


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


_BIN: dict[BinOpKind, Callable[[Any, Any], Any]] = {
    BinOpKind.ADD: lambda x, y: x + y,
    BinOpKind.SUB: lambda x, y: x - y,
    BinOpKind.MUL: lambda x, y: x * y,
    BinOpKind.FLOORDIV: lambda x, y: x // y,
    BinOpKind.FLOORMOD: lambda x, y: x % y,
    BinOpKind.MIN: min,
    BinOpKind.MAX: max,
    BinOpKind.EQ: lambda x, y: x == y,
    BinOpKind.NE: lambda x, y: x != y,
    BinOpKind.LT: lambda x, y: x < y,
    BinOpKind.LE: lambda x, y: x <= y,
    BinOpKind.GT: lambda x, y: x > y,
    BinOpKind.GE: lambda x, y: x >= y,
}

_CALLS: dict[str, Callable[..., Any]] = {
    "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)), "fabs": abs, "abs": abs,
    "floor": math.floor, "ceil": math.ceil, "pow": math.pow, "likely": lambda x: x,
}


def eval_const(e: Any, env: Mapping[Any, Any] | None = None,
               tensors: Mapping[Any, Any] | None = None) -> Any:
    """Value of scalar expression ``e`` with variables bound by ``env`` (Var or IterVar -> number).

    Integers use exact Python arithmetic with floor semantics for ``//`` and ``%`` (no overflow
    wrap-around); booleans come back as ``bool``. ``tensors`` (Tensor -> numpy array) gives the
    values of tensor loads; an out-of-bounds load raises :class:`ExprError`.
    """
    env = {(k.var if isinstance(k, IterVar) else k): v for k, v in (env or {}).items()}
    return _ev(e, env, tensors or {})


def _ev(e: Any, env: Mapping[Var, Any], tensors: Mapping[Any, Any] | None = None) -> Any:
    if isinstance(e, (int, float, bool)):
        return e
    if isinstance(e, IntImm):
        return bool(e.value) if e.dtype == "bool" else e.value
    if isinstance(e, FloatImm):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise ExprError(f"variable {e.name} has no value")
        return env[e]
    if isinstance(e, IterVar):
        return _ev(e.var, env, tensors)
    if isinstance(e, BinOp):
        if e.op is BinOpKind.AND:
            return bool(_ev(e.a, env, tensors)) and bool(_ev(e.b, env, tensors))
        if e.op is BinOpKind.OR:
            return bool(_ev(e.a, env, tensors)) or bool(_ev(e.b, env, tensors))
        x, y = _ev(e.a, env, tensors), _ev(e.b, env, tensors)
        if e.op is BinOpKind.DIV:
            return x / y if dt.is_float(e.dtype) else _trunc_div(int(x), int(y))
        return _BIN[e.op](x, y)
    if isinstance(e, Not):
        return not _ev(e.a, env, tensors)
    if isinstance(e, Select):
        c = _ev(e.cond, env, tensors)
        if e.guarded:
            return _ev(e.true_value if c else e.false_value, env, tensors)
        t, f = _ev(e.true_value, env, tensors), _ev(e.false_value, env, tensors)
        return t if c else f
    if isinstance(e, Cast):
        v = _ev(e.value, env, tensors)
        if dt.is_bool(e.dtype):
            return bool(v)
        if dt.is_int(e.dtype):
            return math.trunc(v)
        return float(v)
    if isinstance(e, Call) and e.name in _CALLS:
        return _CALLS[e.name](*(_ev(a, env, tensors) for a in e.args))
    if isinstance(e, TensorLoad) and tensors and e.tensor in tensors:
        arr = tensors[e.tensor]
        idx = tuple(int(_ev(i, env, tensors)) for i in e.indices)
        if any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
            raise ExprError(f"out-of-bounds read {e.tensor.name}{list(idx)}")
        v = arr[idx].item()
        return bool(v) if e.dtype == "bool" else v
    if isinstance(e, PrimExpr):
        raise ExprError(f"cannot evaluate {type(e).__name__} {e} to a constant")
    raise ExprError(f"not an expression: {e!r}")
