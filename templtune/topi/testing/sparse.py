"""numpy references of the block-sparse (BSR) operators."""

from __future__ import annotations

import numpy as np

__all__ = ["bsr_to_dense", "sparse_dense_python"]


def bsr_to_dense(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, k: int
                 ) -> np.ndarray:
    """The dense ``[N, K]`` matrix of BSR arrays (``data [nnzb, bs_r, bs_c]``)."""
    _, bs_r, bs_c = data.shape
    rows = len(indptr) - 1
    out = np.zeros((rows * bs_r, k), dtype=data.dtype)
    for r in range(rows):
        for b in range(int(indptr[r]), int(indptr[r + 1])):
            col = int(indices[b]) * bs_c
            out[r * bs_r:(r + 1) * bs_r, col:col + bs_c] += data[b]
    return out


def sparse_dense_python(x: np.ndarray, data: np.ndarray, indices: np.ndarray,
                        indptr: np.ndarray) -> np.ndarray:
    """``x @ W.T`` with ``W`` given in BSR form (float64 accumulation)."""
    w = bsr_to_dense(data, indices, indptr, x.shape[1])
    return (x.astype(np.float64) @ w.T.astype(np.float64)).astype(x.dtype)
