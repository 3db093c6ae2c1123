"""Shared pieces of the op strategies: block choices, template arguments of a network
call, and the weight transforms that pre-pack constant weights at build time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from templtune.autotvm import strategy
from templtune.autotvm.strategy import Implementation, OpCall

_MAX_BLOCK = 64
KEYS = ("cpu",)
GPU_KEYS = ("cuda", "gpu")
#: the catalogue's parameter names of the direct convolutions
CONV_PARAMS = ("N", "H", "W", "CO", "CI", "KH", "KW", "stride", "padding")


def pack_blocks(n: int) -> list[int]:
    """Register-block sizes worth packing for: multiples of 8 lanes (up to 64) dividing ``n``."""
    return [b for b in range(8, _MAX_BLOCK + 1, 8) if n % b == 0]


def scalar(pair: Sequence[int]) -> Any:
    """``(s, s)`` -> ``s``; anything else as a tuple (the templates take both)."""
    return pair[0] if len(set(pair)) == 1 else tuple(pair)


def is_conv(call: OpCall, layout: str, depthwise: bool = False) -> bool:
    """A float32 ``nn.conv2d`` with ``layout`` data, depthwise (one channel per group) or
    not grouped; other grouped convolutions are neither."""
    if call.dtype != "float32" or call.attr("data_layout") != layout:
        return False
    groups = call.attr("groups")
    if not depthwise:
        return groups == 1
    c = call.inputs[0][1 if layout == "NCHW" else 3]
    return groups != 1 and groups == c == call.out_shape[1 if layout == "NCHW" else 3]


def conv_nchw_args(call: OpCall) -> tuple[Any, ...]:
    """``(N, H, W, CO, CI, KH, KW, stride, padding)`` of an NCHW / OIHW convolution."""
    n, ci, h, w = call.inputs[0]
    co, _, kh, kw = call.inputs[1]
    return (n, h, w, co, ci, kh, kw, scalar(call.attr("strides")),
            scalar(call.attr("padding")))


def conv_nhwc_args(call: OpCall) -> tuple[Any, ...]:
    """``(N, H, W, CO, CI, KH, KW, stride, padding)`` of an NHWC / HWIO convolution."""
    n, h, w, ci = call.inputs[0]
    kh, kw, _, co = call.inputs[1]
    return (n, h, w, co, ci, kh, kw, scalar(call.attr("strides")),
            scalar(call.attr("padding")))


def pack_conv(b: int) -> Callable[[np.ndarray], np.ndarray]:
    """OIHW -> ``[CO/b, CI, KH, KW, b]``."""
    def f(k: np.ndarray) -> np.ndarray:
        co, ci, kh, kw = k.shape
        return np.ascontiguousarray(k.reshape(co // b, b, ci, kh, kw).transpose(0, 2, 3, 4, 1))
    return f


def pack_dense(b: int) -> Callable[[np.ndarray], np.ndarray]:
    """``[N, K]`` -> ``[N/b, K, b]``."""
    def f(w: np.ndarray) -> np.ndarray:
        n, k = w.shape
        return np.ascontiguousarray(w.reshape(n // b, b, k).transpose(0, 2, 1))
    return f


def winograd_weights(m: int, b: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """OIHW -> ``U = G g G^T`` as ``[alpha, alpha, CI, CO]`` (``b`` = 0) or blocked by ``b``
    output channels, ``[alpha, alpha, CO/b, CI, b]``."""
    def f(k: np.ndarray) -> np.ndarray:
        from templtune.topi.nn.winograd import winograd_transform_matrices

        co, ci, kh, _ = k.shape
        _, _, g = winograd_transform_matrices(m, kh, "float32")
        u = np.einsum("ey,ocyx,ux->euco", g, k.astype(np.float64), g).astype(np.float32)
        if not b:
            return np.ascontiguousarray(u)
        al = u.shape[0]
        return np.ascontiguousarray(u.reshape(al, al, ci, co // b, b).transpose(0, 1, 3, 2, 4))
    return f


def fallback_packed(knob: str) -> Callable[[OpCall, Any, Sequence[Implementation]],
                                            Implementation]:
    """A fallback that runs the packed implementation whose block is the inner size of split
    knob ``knob`` in the plain (last) implementation's config, else the plain one."""
    def choose(call: OpCall, target: Any, impls: Sequence[Implementation]) -> Implementation:
        plain = impls[-1]
        if plain.transform is not None:
            return plain
        cfg = strategy.current_config(plain, target)
        b = int(cfg[knob].size[-1])
        for i in impls:
            if len(i.args) == len(plain.args) + 1 and i.args[-1] == b:
                return i
        return plain
    return choose
