"""Host arrays aligned as TVM's runtime aligns its NDArrays (64 bytes: a cache line, one zmm).

numpy aligns its allocations to 16 bytes only, so a 64-byte vector load from a large numpy
array straddles two cache lines; kernels read the arrays the graph runtime and the measurement
workers give them from memory aligned here instead.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALIGN", "aligned_bytes", "aligned_copy", "view"]

#: byte alignment of the arrays made here
ALIGN = 64


def aligned_bytes(nbytes: int) -> np.ndarray:
    """A zeroed ``uint8`` array of ``nbytes`` that starts on an :data:`ALIGN`-byte boundary."""
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + nbytes]


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` (same shape and dtype) on an :data:`ALIGN`-byte boundary."""
    a = np.asarray(a)
    out = view(aligned_bytes(max(a.nbytes, 1)), a.shape, a.dtype)  # a 0-byte slice may not keep the address
    out[...] = a
    return out


def view(block: np.ndarray, shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    """The array of ``shape`` and ``dtype`` at the start of the ``uint8`` array ``block``."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return block[:n].view(dt).reshape(shape)
