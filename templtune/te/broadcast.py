"""Broadcasting elementwise binary operators: ``add``, ``subtract``, ``multiply``, ``divide``,
``maximum``, ``minimum`` (numpy broadcasting rules; a scalar operand is allowed).

They live in te (re-exported by ``topi``) because ``Tensor`` arithmetic (``conv + bias``) uses
them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from templtune.errors import ExprError
from templtune.te.expr import BinOpKind, IntImm, PrimExpr, binary, convert
from templtune.te.operation import compute
from templtune.te.tensor import Tensor

ELEMWISE = "elemwise"
BROADCAST = "broadcast"

__all__ = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "broadcast_shape"]


def axis_names(fn: Callable[..., Any], ndim: int, prefix: str = "ax") -> Callable[..., Any]:
    """Give a ``lambda *i: ...`` the parameter names ``ax0, ax1, ...`` so that ``compute``
    names its axes like TVM's topi (``T_add(ax0, ax1)``)."""

    def wrapped(*i: Any) -> Any:
        return fn(*i)

    wrapped.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"{prefix}{k}", inspect.Parameter.POSITIONAL_ONLY)
         for k in range(ndim)])
    return wrapped


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def broadcast_shape(a: tuple[PrimExpr, ...], b: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
    """numpy's broadcast of two shapes (dimensions aligned on the right)."""
    n = max(len(a), len(b))
    pa = (None,) * (n - len(a)) + tuple(a)
    pb = (None,) * (n - len(b)) + tuple(b)
    out: list[PrimExpr] = []
    for k, (x, y) in enumerate(zip(pa, pb)):
        if x is None or (y is not None and _is_one(x)):
            out.append(y)  # type: ignore[arg-type]
        elif y is None or _is_one(y):
            out.append(x)
        elif isinstance(x, IntImm) and isinstance(y, IntImm) and x.value != y.value:
            raise ExprError(f"shapes {tuple(map(str, a))} and {tuple(map(str, b))} do not "
                            f"broadcast (dimension {k}: {x.value} vs {y.value})")
        else:
            out.append(x)
    return tuple(out)


def _index(t: Tensor, out_shape: tuple[PrimExpr, ...], idx: tuple[Any, ...]) -> PrimExpr:
    off = len(out_shape) - len(t.shape)
    ind = []
    for k, s in enumerate(t.shape):
        o = out_shape[off + k]
        ind.append(0 if _is_one(s) and not _is_one(o) else idx[off + k])
    return t[tuple(ind)]


def _binary(a: Any, b: Any, fn: Callable[[Any, Any], PrimExpr], name: str) -> Any:
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if not ta and not tb:
        return fn(convert(a), convert(b))
    if ta and tb:
        shape = broadcast_shape(a.shape, b.shape)
        return compute(shape, axis_names(
            lambda *i: fn(_index(a, shape, i), _index(b, shape, i)), len(shape)),
            name=name, tag=BROADCAST)
    t, other = (a, b) if ta else (b, a)
    if ta:
        body = axis_names(lambda *i: fn(t[i], other), len(t.shape))
    else:
        body = axis_names(lambda *i: fn(other, t[i]), len(t.shape))
    return compute(t.shape, body, name=name, tag=ELEMWISE)


def add(lhs: Any, rhs: Any) -> Any:
    """``lhs + rhs`` with broadcasting (output ``T_add``)."""
    return _binary(lhs, rhs, lambda x, y: binary(BinOpKind.ADD, x, y), "T_add")


def subtract(lhs: Any, rhs: Any) -> Any:
    return _binary(lhs, rhs, lambda x, y: binary(BinOpKind.SUB, x, y), "T_subtract")


def multiply(lhs: Any, rhs: Any) -> Any:
    return _binary(lhs, rhs, lambda x, y: binary(BinOpKind.MUL, x, y), "T_multiply")


def divide(lhs: Any, rhs: Any) -> Any:
    return _binary(lhs, rhs, lambda x, y: binary(BinOpKind.DIV, x, y), "T_divide")


def maximum(lhs: Any, rhs: Any) -> Any:
    return _binary(lhs, rhs, lambda x, y: binary(BinOpKind.MAX, x, y), "T_maximum")


def minimum(lhs: Any, rhs: Any) -> Any:
    return _binary(lhs, rhs, lambda x, y: binary(BinOpKind.MIN, x, y), "T_minimum")
