"""``nn.batch_matmul``: ``out[b] = op_a(x[b]) @ op_b(y[b])``, where ``op`` transposes the last
two axes when ``transpose_a`` / ``transpose_b`` say so (Relay's defaults, ``False`` and
``True``, give ``x[b] @ y[b].T``); a batch of 1 on either side broadcasts.

Flags at their defaults are not stored in the call's attributes, so a graph built before the
flags existed keeps its structural keys (and its tuning records)."""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import te, topi
from templtune.topi import testing as ref

from ..ir import Call, Expr, TensorType
from ..op import ANCHOR, GraphError, make_call, register_op


def flags(a: dict[str, Any]) -> tuple[bool, bool]:
    """``(transpose_a, transpose_b)`` of a call's attributes."""
    return bool(a.get("transpose_a", False)), bool(a.get("transpose_b", True))


def _infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    ta, tb = flags(a)
    if len(t[0].shape) != 3 or len(t[1].shape) != 3:
        raise ValueError(f"x and y must be 3-D ([B, {'K, M' if ta else 'M, K'}] and "
                         f"[B, {'N, K' if tb else 'K, N'}])")
    (bx, m, k), (by, n, k2) = t[0].shape, t[1].shape
    if ta:
        m, k = k, m
    if not tb:
        n, k2 = k2, n
    if k != k2:
        raise ValueError(f"inner dimensions differ ({k} vs {k2})")
    if bx != by and 1 not in (bx, by):
        raise ValueError(f"batches {bx} and {by} neither match nor broadcast")
    return (max(bx, by), m, n)


def _compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    ta, tb = flags(a)
    return topi.nn.batch_matmul(x[0], x[1], transpose_a=ta, transpose_b=tb)


def _reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    ta, tb = flags(a)
    return ref.batch_matmul_python(x[0], x[1], ta, tb)


def batch_matmul(tensor_a: Expr, tensor_b: Expr, out_dtype: str = "",
                 transpose_a: bool = False, transpose_b: bool = True) -> Call:
    """Batched matrix product (``relay.nn.batch_matmul``).

    Parameters
    ----------
    tensor_a : Expr
        ``[B, M, K]``, or ``[B, K, M]`` with ``transpose_a``.
    tensor_b : Expr
        ``[B, N, K]`` with ``transpose_b`` (the default), else ``[B, K, N]``.
    out_dtype : str
        Only ``""`` or the input dtype (no mixed precision).
    transpose_a, transpose_b : bool
        Whether the last two axes of each operand are read transposed.

    Returns
    -------
    Call
        ``[B, M, N]``.

    Raises
    ------
    GraphError
        If the shapes do not fit the flags or ``out_dtype`` differs from the inputs'.
    """
    if out_dtype and out_dtype != tensor_a.dtype:
        raise GraphError(f"nn.batch_matmul: out_dtype {out_dtype!r} differs from the input "
                         f"dtype {tensor_a.dtype!r}")
    attrs: dict[str, Any] = {}
    if transpose_a:
        attrs["transpose_a"] = True
    if not transpose_b:
        attrs["transpose_b"] = False
    return make_call("nn.batch_matmul", [tensor_a, tensor_b], **attrs)


register_op("nn.batch_matmul", ANCHOR, _infer, _compute, _reference, builder=batch_matmul)
