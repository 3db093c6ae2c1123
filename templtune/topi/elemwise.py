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


def _reshape_groups(old: tuple[int, ...], new: tuple[int, ...]
                    ) -> list[tuple[list[int], list[int]]]:
    """The non-unit axes of ``new`` and ``old`` in consecutive runs of equal size product
    (row-major order makes each run's elements contiguous in both shapes)."""
    o = [k for k, d in enumerate(old) if d != 1]
    n = [k for k, d in enumerate(new) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    while o or n:
        go, gn = [o.pop(0)], [n.pop(0)]
        po, pn = old[go[0]], new[gn[0]]
        while po != pn:
            if po < pn:
                go.append(o.pop(0))
                po *= old[go[-1]]
            else:
                gn.append(n.pop(0))
                pn *= new[gn[-1]]
        groups.append((gn, go))
    return groups


def reshape(x: te.Tensor, newshape: Sequence[int]) -> te.Tensor:
    """Row-major reshape of a constant-shape tensor.

    Each run of axes whose sizes multiply to the same product in both shapes maps on its own,
    and unit axes not at all: a reshape that adds or drops unit axes reads ``x`` at the same
    indices, without the divisions of a flat index (which vector code would do lane by lane).
    """
    old = get_const_tuple(x.shape)
    new = tuple(int(s) for s in newshape)
    if math.prod(old) != math.prod(new):  # type: ignore[arg-type]
        raise ExprError(f"reshape: cannot reshape {old} to {new}")
    groups = _reshape_groups(old, new)  # type: ignore[arg-type]

    def f(*i: Any) -> PrimExpr:
        idx: list[Any] = [0] * len(old)
        for gn, go in groups:
            flat = i[gn[0]]
            for k in gn[1:]:
                flat = flat * new[k] + i[k]
            # NOTE: the outermost axis of a run needs no modulo (flat < the run's product)
            for k in reversed(go[1:]):
                idx[k] = flat % old[k]
                flat = flat // old[k]
            idx[go[0]] = flat
        return x[tuple(idx)]

    return te.compute(new, axis_names(f, len(new)), name="T_reshape", tag=tag.INJECTIVE)
