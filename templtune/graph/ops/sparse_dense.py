"""``nn.sparse_dense``: ``data @ W.T`` with ``W`` block-sparse (BSR arrays as three inputs).

``max_blocks_per_row`` (the reduction's static extent) is an attribute: the conversion that
makes the call knows it from the constant index arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import te, topi
from templtune.topi import testing as ref

from ..ir import Call, Expr, TensorType
from ..op import ANCHOR, GraphError, make_call, register_op

_OP = "nn.sparse_dense"


def _infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    x, d, ind, ptr = (tt.shape for tt in t)
    if len(x) != 2 or len(d) != 3 or len(ind) != 1 or len(ptr) != 1:
        raise ValueError("expected data [M, K], weight_data [nnz_blocks, bs_r, bs_c], "
                         "weight_indices [nnz_blocks], weight_indptr [N / bs_r + 1]")
    if ind[0] != d[0]:
        raise ValueError(f"{ind[0]} indices for {d[0]} blocks")
    if x[1] % d[2]:
        raise ValueError(f"K={x[1]} is not a multiple of the block width {d[2]}")
    if ptr[0] < 1:
        raise ValueError("weight_indptr needs at least one entry")
    return (x[0], (ptr[0] - 1) * d[1])


def _dtype(t: list[TensorType], a: dict[str, Any]) -> str:
    if t[1].dtype != t[0].dtype:
        raise ValueError(f"weight dtype {t[1].dtype!r} differs from the input dtype "
                         f"{t[0].dtype!r}")
    if t[2].dtype != "int32" or t[3].dtype != "int32":
        raise ValueError(f"indices and indptr must be int32, got {t[2].dtype!r} and "
                         f"{t[3].dtype!r}")
    return t[0].dtype


def _compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    return topi.nn.sparse_dense(x[0], x[1], x[2], x[3],
                                max_blocks_per_row=a.get("max_blocks_per_row"))


def _reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return ref.sparse_dense_python(x[0], x[1], x[2], x[3])


def sparse_dense(dense_mat: Expr, sparse_mat: tuple[Expr, Expr, Expr] | list[Expr],
                 sparse_lhs: bool = False, max_blocks_per_row: int | None = None) -> Call:
    """``dense_mat @ W.T`` where ``sparse_mat = (data, indices, indptr)`` is ``W`` in BSR form
    (``relay.nn.sparse_dense``).

    Parameters
    ----------
    dense_mat : Expr
        ``[M, K]``, float.
    sparse_mat : (Expr, Expr, Expr)
        BSR ``data [nnz_blocks, bs_r, bs_c]``, int32 ``indices [nnz_blocks]`` and int32
        ``indptr [N / bs_r + 1]``.
    sparse_lhs : bool
        Only False is supported.
    max_blocks_per_row : int, optional
        The most blocks of a block row (default: every column block).

    Raises
    ------
    GraphError
        On ``sparse_lhs=True``, index arrays that are not int32, or mismatched shapes.
    """
    if sparse_lhs:
        raise GraphError(f"{_OP}: only sparse_lhs=False is supported")
    attrs: dict[str, Any] = {}
    if max_blocks_per_row is not None:
        attrs["max_blocks_per_row"] = int(max_blocks_per_row)
    return make_call(_OP, [dense_mat, *sparse_mat], **attrs)


register_op(_OP, ANCHOR, _infer, _compute, _reference, builder=sparse_dense, dtype=_dtype)
