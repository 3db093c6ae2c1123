"""``nn.batch_matmul``: ``out[b] = x[b] @ y[b].T`` (Relay's default ``transpose_b=True``);
a batch of 1 on either side broadcasts."""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import te, topi
from templtune.topi import testing as ref

from ..ir import Call, Expr, TensorType
from ..op import ANCHOR, GraphError, make_call, register_op


def _infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    if len(t[0].shape) != 3 or len(t[1].shape) != 3:
        raise ValueError("x and y must be 3-D ([B, M, K] and [B, N, K])")
    (bx, m, k), (by, n, k2) = t[0].shape, t[1].shape
    if k != k2:
        raise ValueError(f"inner dimensions differ ({k} vs {k2})")
    if bx != by and 1 not in (bx, by):
        raise ValueError(f"batches {bx} and {by} neither match nor broadcast")
    return (max(bx, by), m, n)


def _compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    return topi.nn.batch_matmul(x[0], x[1])


def _reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return ref.batch_matmul_python(x[0], x[1])


def batch_matmul(tensor_a: Expr, tensor_b: Expr, out_dtype: str = "",
                 transpose_a: bool = False, transpose_b: bool = True) -> Call:
    """Batched ``tensor_a @ tensor_b.T`` (``relay.nn.batch_matmul``; only Relay's default
    transposes and an unchanged dtype are supported)."""
    if transpose_a or not transpose_b:
        raise GraphError("nn.batch_matmul: only transpose_a=False, transpose_b=True is "
                         "supported")
    if out_dtype and out_dtype != tensor_a.dtype:
        raise GraphError(f"nn.batch_matmul: out_dtype {out_dtype!r} differs from the input "
                         f"dtype {tensor_a.dtype!r}")
    return make_call("nn.batch_matmul", [tensor_a, tensor_b])


register_op("nn.batch_matmul", ANCHOR, _infer, _compute, _reference, builder=batch_matmul)
