"""Block-sparse (BSR) matrices in numpy: conversion from dense and random test matrices.

``topi.sparse.utils`` (TVM's module name) adds the network conversion and the auto-scheduler
sketch rules on top; it sits with the ``relay`` facade in the layering.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BSRMatrix", "dense_to_bsr", "random_bsr_matrix"]


@dataclass(frozen=True, slots=True, eq=False)
class BSRMatrix:
    """A block-sparse row matrix with scipy's ``bsr_matrix`` attribute names.

    ``data [nnz_blocks, bs_r, bs_c]``, ``indices [nnz_blocks]`` (int32 column-block of each
    block) and ``indptr [rows / bs_r + 1]`` (int32 start of each block row)."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    @property
    def blocksize(self) -> tuple[int, int]:
        return (int(self.data.shape[1]), int(self.data.shape[2]))

    @property
    def max_blocks_per_row(self) -> int:
        return int(np.diff(self.indptr).max(initial=0))

    def todense(self) -> np.ndarray:
        bs_r, bs_c = self.blocksize
        out = np.zeros(self.shape, dtype=self.data.dtype)
        for r in range(len(self.indptr) - 1):
            for b in range(int(self.indptr[r]), int(self.indptr[r + 1])):
                col = int(self.indices[b]) * bs_c
                out[r * bs_r:(r + 1) * bs_r, col:col + bs_c] = self.data[b]
        return out

    def toarray(self) -> np.ndarray:
        return self.todense()


def dense_to_bsr(w: np.ndarray, bs_r: int, bs_c: int) -> BSRMatrix:
    """``w`` (``[N, K]``) in BSR form, keeping every block with a nonzero entry.

    Raises
    ------
    ValueError
        If ``w`` is not 2-D or its shape is not a multiple of the block shape.
    """
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"dense_to_bsr: expected a 2-D matrix, got shape {w.shape}")
    n, k = w.shape
    if n % bs_r or k % bs_c:
        raise ValueError(f"dense_to_bsr: shape {w.shape} is not a multiple of the block "
                         f"({bs_r}, {bs_c})")
    blocks = w.reshape(n // bs_r, bs_r, k // bs_c, bs_c).transpose(0, 2, 1, 3)
    keep = np.abs(blocks).reshape(n // bs_r, k // bs_c, -1).max(axis=2) > 0
    rows, cols = np.nonzero(keep)               # row-major: blocks of a row are contiguous
    indptr = np.zeros(n // bs_r + 1, dtype=np.int32)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    return BSRMatrix(np.ascontiguousarray(blocks[rows, cols]).astype(w.dtype),
                     cols.astype(np.int32), indptr, (n, k))


def random_bsr_matrix(m: int, n: int, bs_r: int, bs_c: int, density: float, dtype: str,
                      rng: np.random.Generator | None = None) -> BSRMatrix:
    """A random ``[m, n]`` BSR matrix with about ``density`` of its blocks nonzero (TVM's
    ``random_bsr_matrix``; at least one block is kept).

    Raises
    ------
    ValueError
        If the shape is not a multiple of the block shape or ``density`` is outside [0, 1].
    """
    if m % bs_r or n % bs_c:
        raise ValueError(f"random_bsr_matrix: ({m}, {n}) is not a multiple of the block "
                         f"({bs_r}, {bs_c})")
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"random_bsr_matrix: density {density} is not in [0, 1]")
    rng = rng if rng is not None else np.random.default_rng()
    nblocks = (m // bs_r) * (n // bs_c)
    nnz = max(1, int(round(density * nblocks)))
    chosen = np.zeros(nblocks, dtype=bool)
    chosen[rng.choice(nblocks, size=nnz, replace=False)] = True
    mask = np.repeat(np.repeat(chosen.reshape(m // bs_r, n // bs_c), bs_r, 0), bs_c, 1)
    # NOTE: values away from zero, so every chosen block stays a block after conversion
    vals = rng.uniform(0.5, 1.5, size=(m, n)) * rng.choice([-1.0, 1.0], size=(m, n))
    return dense_to_bsr((vals * mask).astype(dtype), bs_r, bs_c)
