"""numpy references for dense, pooling and softmax."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from templtune.topi.testing.conv import _pair, pad_tuple

__all__ = ["dense_python", "pool2d_python", "softmax_python", "adaptive_pool2d_python",
           "batch_matmul_python"]


def dense_python(a_np: np.ndarray, w_np: np.ndarray, bias: np.ndarray | None = None
                 ) -> np.ndarray:
    """``a @ w.T (+ bias)`` with ``w`` of shape ``[out, in]``."""
    out = a_np.astype(np.float64) @ w_np.astype(np.float64).T
    if bias is not None:
        out = out + bias
    return out.astype(a_np.dtype)


def softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Reference softmax along ``axis`` (default 1, as TVM's reference)."""
    x = a_np.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(a_np.dtype)


def pool2d_python(a_np: np.ndarray, kernel: Any, stride: Any, padding: Any, pool_type: str,
                  ceil_mode: bool = False, count_include_pad: bool = True,
                  layout: str = "NCHW", dilation: Any = 1) -> np.ndarray:
    """Reference 2-D pooling by explicit windows."""
    x = a_np if layout == "NCHW" else a_np.transpose(0, 3, 1, 2)
    n, c, h, w = x.shape
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    pt, pl, pb, pr = pad_tuple(padding, kh, kw)
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1

    def osize(size: int, k: int, lo: int, hi: int, s: int) -> int:
        span = size + lo + hi - k
        return (math.ceil(span / s) if ceil_mode else span // s) + 1

    oh, ow = osize(h, ekh, pt, pb, sh), osize(w, ekw, pl, pr, sw)
    out = np.zeros((n, c, oh, ow), dtype=np.float64)
    xf = x.astype(np.float64)
    for i in range(oh):
        for j in range(ow):
            rows = [i * sh - pt + t * dh for t in range(kh)]
            cols = [j * sw - pl + t * dw for t in range(kw)]
            rv = [r for r in rows if 0 <= r < h]
            cv = [q for q in cols if 0 <= q < w]
            win = xf[:, :, rv][:, :, :, cv]
            if pool_type == "max":
                vals = win.reshape(n, c, -1)
                # padded positions hold -inf; a window of only padding gives -inf
                out[:, :, i, j] = vals.max(axis=2) if vals.shape[2] else -np.inf
            else:
                total = win.reshape(n, c, -1).sum(axis=2)
                div = kh * kw if count_include_pad else max(len(rv) * len(cv), 1)
                out[:, :, i, j] = total / div
    res = out.astype(a_np.dtype)
    return res if layout == "NCHW" else res.transpose(0, 2, 3, 1)


def adaptive_pool2d_python(a_np: np.ndarray, output_size: Any, pool_type: str,
                           layout: str = "NCHW") -> np.ndarray:
    """Reference adaptive pooling (windows ``[floor(o*n/osz), ceil((o+1)*n/osz))``)."""
    x = a_np if layout == "NCHW" else a_np.transpose(0, 3, 1, 2)
    n, c, h, w = x.shape
    oh, ow = _pair(output_size)
    out = np.zeros((n, c, oh, ow), dtype=np.float64)
    for i in range(oh):
        hs, he = (i * h) // oh, -(-(i + 1) * h // oh)
        for j in range(ow):
            ws, we = (j * w) // ow, -(-(j + 1) * w // ow)
            win = x[:, :, hs:he, ws:we].astype(np.float64)
            out[:, :, i, j] = win.max(axis=(2, 3)) if pool_type == "max" else win.mean(
                axis=(2, 3))
    res = out.astype(a_np.dtype)
    return res if layout == "NCHW" else res.transpose(0, 2, 3, 1)


def batch_matmul_python(x: np.ndarray, y: np.ndarray, trans_x: bool = False,
                        trans_y: bool = True) -> np.ndarray:
    """``x @ y.transpose(0, 2, 1)`` (the default) with batch-1 broadcasting; ``trans_x`` /
    ``trans_y`` say whether the last two axes of ``x`` / ``y`` are read transposed."""
    a = x.astype(np.float64)
    b = y.astype(np.float64)
    a = a.transpose(0, 2, 1) if trans_x else a
    b = b.transpose(0, 2, 1) if trans_y else b
    return np.matmul(a, b).astype(x.dtype)
