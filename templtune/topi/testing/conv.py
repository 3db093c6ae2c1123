"""numpy reference convolutions (independent of te: padding + strided slices + einsum)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["conv2d_nchw_python", "conv2d_nhwc_python", "depthwise_conv2d_python_nchw",
           "pad_tuple"]


def _pair(x: Any) -> tuple[int, int]:
    if isinstance(x, (tuple, list)):
        return int(x[0]), int(x[1])
    return int(x), int(x)


def pad_tuple(padding: Any, kh: int, kw: int) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` from int / pair / 4-tuple / "SAME" / "VALID"."""
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return 0, 0, 0, 0
        ph, pw = kh - 1, kw - 1
        return (ph + 1) // 2, (pw + 1) // 2, ph // 2, pw // 2
    if isinstance(padding, (tuple, list)) and len(padding) == 4:
        t, left, b, r = (int(p) for p in padding)
        return t, left, b, r
    ph, pw = _pair(padding)
    return ph, pw, ph, pw


def conv2d_nchw_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                       groups: int = 1, dilation: Any = 1) -> np.ndarray:
    """Reference NCHW x OIHW convolution (float64 accumulation, result in ``a_np.dtype``).
    The argument order follows TVM's ``conv2d_nchw_python(a, w, stride, padding, groups)``."""
    n, c, h, w = a_np.shape
    o, cg, kh, kw = w_np.shape
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    pt, pl, pb, pr = pad_tuple(padding, (kh - 1) * dh + 1, (kw - 1) * dw + 1)
    a = np.pad(a_np.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        ag = a[:, g * cg:(g + 1) * cg]
        wg = w_np[g * og:(g + 1) * og].astype(np.float64)
        for y in range(kh):
            for x in range(kw):
                win = ag[:, :, y * dh: y * dh + (oh - 1) * sh + 1: sh,
                         x * dw: x * dw + (ow - 1) * sw + 1: sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", win, wg[:, :, y, x])
    return out.astype(a_np.dtype)


def conv2d_nhwc_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                       groups: int = 1, dilation: Any = 1) -> np.ndarray:
    """Reference NHWC x HWIO convolution."""
    a = a_np.transpose(0, 3, 1, 2)
    w = w_np.transpose(3, 2, 0, 1)
    return conv2d_nchw_python(a, w, stride, padding, groups, dilation).transpose(0, 2, 3, 1)


def depthwise_conv2d_python_nchw(input_np: np.ndarray, filter_np: np.ndarray, stride: Any,
                                 padding: Any, dilation: Any = 1) -> np.ndarray:
    """Reference depthwise convolution; filter ``[C, multiplier, kh, kw]``, output channel
    ``c * multiplier + q`` uses input channel ``c`` and filter ``[c, q]``."""
    c, mult, kh, kw = filter_np.shape
    # a grouped convolution with one group per input channel
    w = filter_np.reshape(c * mult, 1, kh, kw)
    return conv2d_nchw_python(input_np, w, stride, padding, groups=c, dilation=dilation)
