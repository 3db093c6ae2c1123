"""Activation and bias ops: ``relu``, ``leaky_relu``, ``bias_add``."""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.te.expr import PrimExpr
from templtune.topi import tag
from templtune.topi.utils import axis_names

__all__ = ["relu", "leaky_relu", "bias_add"]


def relu(x: te.Tensor) -> te.Tensor:
    """``max(x, 0)`` elementwise (output named ``compute``, axes ``i0, i1, ...`` as TVM)."""
    return te.compute(x.shape, lambda *i: te.max(x[i], te.const(0, x.dtype)), tag=tag.ELEMWISE)


def leaky_relu(x: te.Tensor, alpha: float) -> te.Tensor:
    def f(*i: Any) -> PrimExpr:
        v = x[i]
        return te.select(v > 0, v, v * te.const(alpha, x.dtype))

    return te.compute(x.shape, f, tag=tag.ELEMWISE)


def bias_add(data: te.Tensor, bias: te.Tensor, axis: int = 1) -> te.Tensor:
    """``data + bias`` with the 1-D ``bias`` broadcast along dimension ``axis``."""
    nd = len(data.shape)
    ax = axis % nd if nd else 0
    if len(bias.shape) != 1:
        raise ExprError(f"bias_add: bias must be 1-D, got shape {tuple(map(str, bias.shape))}")
    return te.compute(data.shape, axis_names(lambda *i: data[i] + bias[i[ax]], nd),
                      name="T_add", tag=tag.BROADCAST)
