"""Constant padding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.te.expr import PrimExpr
from templtune.te.simplify import simplify
from templtune.topi import tag
from templtune.topi.utils import get_const_int

__all__ = ["pad"]


def pad(data: te.Tensor, pad_before: Sequence[Any], pad_after: Sequence[Any] | None = None,
        pad_value: float = 0.0, name: str = "PadInput") -> te.Tensor:
    """Pad ``data`` with ``pad_value``: ``pad_before[k]`` elements before and ``pad_after[k]``
    after dimension ``k``.

    Parameters
    ----------
    data : Tensor
    pad_before, pad_after : sequence of int
        One entry per dimension; ``pad_after`` defaults to ``pad_before``.
    pad_value : float
    name : str

    Returns
    -------
    Tensor
        A compute tagged ``"injective,pad"`` whose body is a guarded ``if_then_else``.
    """
    n = len(data.shape)
    pad_after = pad_before if pad_after is None else pad_after
    if len(pad_before) != n or len(pad_after) != n:
        raise ExprError(f"pad: input has {n} dimensions, got pad_before={tuple(pad_before)} "
                        f"pad_after={tuple(pad_after)}")
    before = [get_const_int(p) for p in pad_before]
    after = [get_const_int(p) for p in pad_after]
    if any(p < 0 for p in before + after):
        raise ExprError(f"pad: negative padding {before} / {after}")
    out_shape = tuple(simplify(data.shape[k] + before[k] + after[k]) for k in range(n))
    value = te.const(pad_value, data.dtype)

    def f(*idx: Any) -> PrimExpr:
        conds = []
        index = []
        for k in range(n):
            if before[k] == 0 and after[k] == 0:
                index.append(idx[k])
                continue
            index.append(idx[k] - before[k] if before[k] else idx[k])
            if before[k]:
                conds.append(idx[k] >= before[k])
            if after[k]:
                conds.append(idx[k] < data.shape[k] + before[k])
        if not conds:
            return data[tuple(index)]
        return te.if_then_else(te.all(*conds), data[tuple(index)], value)

    return te.compute(out_shape, f, name=name, tag=tag.INJECTIVE + ",pad")
