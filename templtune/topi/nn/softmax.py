"""Softmax along one axis, as four computes (max, exp, sum, normalise) like TVM."""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.te.expr import PrimExpr

__all__ = ["softmax"]


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``.

    Returns ``T_softmax_norm`` (tag ``"softmax_output"``) built from ``T_softmax_maxelem``,
    ``T_softmax_exp`` and ``T_softmax_expsum``.
    """
    nd = len(x.shape)
    if not -nd <= axis < nd:
        raise ExprError(f"softmax: axis {axis} out of range for a {nd}-D tensor")
    ax = axis % nd
    reduced_shape = tuple(s for k, s in enumerate(x.shape) if k != ax)
    k1 = te.reduce_axis((0, x.shape[ax]), name="k")
    k2 = te.reduce_axis((0, x.shape[ax]), name="k")

    def full(i: tuple[Any, ...], r: Any) -> tuple[Any, ...]:
        return tuple(i[:ax]) + (r,) + tuple(i[ax:])

    def red(i: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(v for k, v in enumerate(i) if k != ax)

    maxelem = te.compute(reduced_shape, lambda *i: te.max(x[full(i, k1)], axis=k1),
                         name="T_softmax_maxelem")
    expv = te.compute(x.shape, lambda *i: te.exp(x[i] - maxelem[red(i)]), name="T_softmax_exp")
    expsum = te.compute(reduced_shape, lambda *i: te.sum(expv[full(i, k2)], axis=k2),
                        name="T_softmax_expsum")

    def norm(*i: Any) -> PrimExpr:
        return expv[i] / expsum[red(i)]

    return te.compute(x.shape, norm, name="T_softmax_norm", tag="softmax_output",
                      attrs={"axis": ax})
