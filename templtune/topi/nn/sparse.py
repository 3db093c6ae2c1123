"""Block-sparse dense: ``Y = X @ W.T`` with ``W`` in BSR form (``topi.nn.sparse_dense``).

TE reductions have static extents, so the row loop runs over ``max_blocks_per_row`` blocks
(known to the caller from the constant index arrays) and guards the ones a row lacks.
"""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.topi.utils import get_const_tuple

__all__ = ["sparse_dense"]


def sparse_dense(data: te.Tensor, weight_data: te.Tensor, weight_indices: te.Tensor,
                 weight_indptr: te.Tensor, max_blocks_per_row: int | None = None,
                 sparse_lhs: bool = False) -> te.Tensor:
    """``data @ W.T`` where ``W`` (``[N, K]``) is block-sparse (BSR).

    Parameters
    ----------
    data : Tensor
        ``[M, K]``.
    weight_data : Tensor
        ``[nnz_blocks, bs_r, bs_c]``, the nonzero blocks.
    weight_indices : Tensor
        ``[nnz_blocks]`` int32: each block's column-block index.
    weight_indptr : Tensor
        ``[N / bs_r + 1]`` int32: where each block row starts in ``weight_data``.
    max_blocks_per_row : int, optional
        The most blocks any block row holds (the reduction's static extent); default: all
        column blocks ``K / bs_c``, correct for any matrix but slower.
    sparse_lhs : bool
        Only False (TVM's default, ``X`` dense on the left) is supported.

    Returns
    -------
    Tensor
        ``[M, N]``, named ``T_sparse_dense`` (tag ``"sparse_dense_bsrmm"``).

    Raises
    ------
    ExprError
        On inconsistent shapes or ``sparse_lhs=True``.
    """
    if sparse_lhs:
        raise ExprError("sparse_dense: only sparse_lhs=False is supported")
    if len(data.shape) != 2 or len(weight_data.shape) != 3:
        raise ExprError("sparse_dense: data must be 2-D [M, K] and weight_data 3-D "
                        "[nnz_blocks, bs_r, bs_c] (BSR)")
    m, k = get_const_tuple(data.shape)
    nnzb, bs_r, bs_c = get_const_tuple(weight_data.shape)
    (n_ind,) = get_const_tuple(weight_indices.shape)
    (n_ptr,) = get_const_tuple(weight_indptr.shape)
    if n_ind != nnzb:
        raise ExprError(f"sparse_dense: {n_ind} indices for {nnzb} blocks")
    if k % bs_c:
        raise ExprError(f"sparse_dense: K={k} is not a multiple of the block width {bs_c}")
    n = (n_ptr - 1) * bs_r
    if max_blocks_per_row is None:
        max_blocks_per_row = k // bs_c
    max_blocks_per_row = min(int(max_blocks_per_row), k // bs_c)
    out_dtype = data.dtype
    if nnzb == 0 or max_blocks_per_row == 0:
        return te.compute((m, n), lambda i, j: te.const(0, out_dtype),
                          name="T_sparse_dense", tag="sparse_dense_bsrmm")
    kb = te.reduce_axis((0, max_blocks_per_row), name="kb")
    c = te.reduce_axis((0, bs_c), name="c")

    def f(i: Any, j: Any) -> Any:
        row = j // bs_r
        start = weight_indptr[row]
        present = kb < weight_indptr[row + 1] - start
        # NOTE: a missing block reads block 0 (a valid address) and is multiplied away by the
        # guard, so no load ever leaves the arrays.
        off = te.select(present, start + kb, 0)
        prod = (weight_data[off, j % bs_r, c]
                * data[i, weight_indices[off] * bs_c + c])
        return te.sum(te.if_then_else(present, prod, te.const(0, out_dtype)), axis=[kb, c])

    return te.compute((m, n), f, name="T_sparse_dense", tag="sparse_dense_bsrmm",
                      attrs={"FLOP": 2 * m * n * max_blocks_per_row * bs_c})
