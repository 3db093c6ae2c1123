"""Elementwise unary ops and simple injective transforms."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.te.expr import PrimExpr
from templtune.topi import tag
from templtune.topi.utils import axis_names, get_const_tuple

__all__ = ["exp", "sqrt", "tanh", "sigmoid", "reshape", "transpose", "unary"]


def unary(x: te.Tensor, fn: Callable[[PrimExpr], PrimExpr], name: str = "compute") -> te.Tensor:
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name, tag=tag.ELEMWISE)


def exp(x: te.Tensor) -> te.Tensor:
    return unary(x, te.exp, "T_exp")


def sqrt(x: te.Tensor) -> te.Tensor:
    return unary(x, te.sqrt, "T_sqrt")


def tanh(x: te.Tensor) -> te.Tensor:
    return unary(x, te.tanh, "T_tanh")


def sigmoid(x: te.Tensor) -> te.Tensor:
    return unary(x, te.sigmoid, "T_sigmoid")


def transpose(x: te.Tensor, axes: Sequence[int] | None = None) -> te.Tensor:
    """Permute dimensions (reverse them when ``axes`` is None)."""
    nd = len(x.shape)
    perm = list(range(nd))[::-1] if axes is None else [a % nd for a in axes]
    if sorted(perm) != list(range(nd)):
        raise ExprError(f"transpose: {axes} is not a permutation of {nd} axes")
    shape = tuple(x.shape[p] for p in perm)

    def f(*i: Any) -> PrimExpr:
        idx: list[Any] = [None] * nd
        for k, p in enumerate(perm):
            idx[p] = i[k]
        return x[tuple(idx)]

    return te.compute(shape, axis_names(f, nd), name="T_transpose", tag=tag.INJECTIVE)


def reshape(x: te.Tensor, newshape: Sequence[int]) -> te.Tensor:
    """Row-major reshape of a constant-shape tensor."""
    old = get_const_tuple(x.shape)
    new = tuple(int(s) for s in newshape)
    if math.prod(old) != math.prod(new):  # type: ignore[arg-type]
        raise ExprError(f"reshape: cannot reshape {old} to {new}")

    def f(*i: Any) -> PrimExpr:
        flat: Any = 0
        for k, s in zip(i, new):
            flat = flat * s + k
        idx = []
        for s in reversed(old):
            idx.append(flat % s)
            flat = flat // s
        return x[tuple(reversed(idx))]

    return te.compute(new, axis_names(f, len(new)), name="T_reshape", tag=tag.INJECTIVE)
