"""Blocked-layout operators: ``layout_transform`` and ``nn.contrib_conv2d_NCHWc`` (TVM's names).

``NCHW{b}c`` stores channel ``c`` of an NCHW activation at ``[n, c // b, y, x, c % b]``; a
convolution kernel in ``OIHW{i}i{o}o`` stores ``k[o, i, y, x]`` at ``[o // ob, i // ib, y, x,
i % ib, o % ob]``. The numpy helpers here are what the alter-layout pass packs constant weights
with, once, when a network is built.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from templtune import te
from templtune.topi import testing as ref
from templtune.topi.nn.conv2d import group_merge
from templtune.topi.utils import round_up

from ..ir import Call, Expr, TensorType
from ..op import ANCHOR, make_call, register_op

__all__ = ["block_of", "blocked", "pack_data", "unpack_data", "pack_kernel",
           "merged_groups", "pack_group_kernel", "pack_bias", "transform_array",
           "layout_transform", "conv2d_nchwc"]

_BLOCKED = re.compile(r"NCHW(\d+)c")


def block_of(layout: str) -> int:
    """The channel block of ``NCHW{b}c`` (0 for plain ``NCHW``).

    Raises
    ------
    ValueError
        For any other layout.
    """
    if layout == "NCHW":
        return 0
    m = _BLOCKED.fullmatch(layout)
    if m is None:
        raise ValueError(f"unsupported layout {layout!r} (NCHW or NCHW[x]c)")
    return int(m.group(1))


def blocked(b: int) -> str:
    """The layout name of channel block ``b`` (``0``: ``NCHW``)."""
    return f"NCHW{b}c" if b else "NCHW"


def _pad_axis(x: np.ndarray, axis: int, size: int) -> np.ndarray:
    """``x`` zero-padded along ``axis`` to ``size``."""
    if x.shape[axis] == size:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return np.pad(x, pad)


def pack_data(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW -> NCHW{b}c (zeros past the channels where ``b`` does not divide them)."""
    n, c, h, w = x.shape
    x = _pad_axis(x, 1, round_up(c, b))
    return np.ascontiguousarray(x.reshape(n, -1, b, h, w).transpose(0, 1, 3, 4, 2))


def unpack_data(x: np.ndarray, channels: int = 0) -> np.ndarray:
    """NCHW{b}c -> NCHW, the first ``channels`` (default: all the blocks hold)."""
    n, c1, h, w, b = x.shape
    out = x.transpose(0, 1, 4, 2, 3).reshape(n, c1 * b, h, w)
    return np.ascontiguousarray(out[:, :channels] if channels else out)


def transform_array(x: np.ndarray, src: str, dst: str, channels: int = 0) -> np.ndarray:
    """``x`` from layout ``src`` to ``dst`` (NCHW or NCHW[x]c) holding ``channels`` channels
    (default: all the source holds)."""
    sb, db = block_of(src), block_of(dst)
    plain = unpack_data(x, channels) if sb else x
    return pack_data(plain, db) if db else np.ascontiguousarray(plain)


def pack_kernel(k: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """OIHW -> OIHW{ic_bn}i{oc_bn}o (zero weights for the padded channels)."""
    o, i, kh, kw = k.shape
    k = _pad_axis(_pad_axis(k, 0, round_up(o, oc_bn)), 1, round_up(i, ic_bn))
    return np.ascontiguousarray(
        k.reshape(-1, oc_bn, k.shape[1] // ic_bn, ic_bn, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def merged_groups(groups: int, out_channels: int, oc_bn: int) -> int:
    """Groups of a grouped convolution whose output block ``oc_bn`` exceeds a group's output
    channels: neighbouring groups merge until one block holds whole groups."""
    return groups // group_merge(groups, out_channels, oc_bn)


def pack_group_kernel(k: np.ndarray, groups: int, ic_bn: int, oc_bn: int) -> np.ndarray:
    """A grouped OIHW kernel (``[O, I/groups, KH, KW]``) as ``OIHW{ic_bn}i{oc_bn}o``; where an
    output block holds ``m > 1`` whole groups (:func:`merged_groups`), in the split form
    ``[O/oc_bn, 1, KH, KW, I/groups, oc_bn]``: output lane ``v`` of a block weighs the input
    channels of its own group (``v // (oc_bn/m)``), whose ``m`` groups' inputs make up input
    block ``ic_bn = m * I/groups`` (no zero weights between the groups)."""
    o, cg, kh, kw = k.shape
    m = groups // merged_groups(groups, o, oc_bn)
    if m == 1:
        return pack_kernel(k, ic_bn, oc_bn)
    if ic_bn != m * cg:
        raise ValueError(f"an output block of {m} groups reads one input block of their "
                         f"{m * cg} channels, not {ic_bn}")
    return np.ascontiguousarray(
        k.reshape(o // oc_bn, oc_bn, 1, cg, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def pack_bias(b: np.ndarray, oc_bn: int) -> np.ndarray:
    """A per-channel vector as ``[1, C/oc_bn, 1, 1, oc_bn]`` (broadcast over NCHW{oc_bn}c;
    zeros past the channels)."""
    return np.ascontiguousarray(_pad_axis(b, 0, round_up(b.shape[0], oc_bn))
                                .reshape(1, -1, 1, 1, oc_bn))


# ---- layout_transform ---------------------------------------------------------------------------
def _channels(shape: tuple[int, ...], a: dict[str, Any]) -> int:
    """The channels a ``layout_transform`` moves: its ``channels`` attribute (a blocked
    tensor's channels where the block does not divide them), else all the source holds."""
    if a.get("channels"):
        return int(a["channels"])
    return shape[1] * shape[4] if block_of(a["src_layout"]) else shape[1]


def _lt_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    shape = t[0].shape
    c = _channels(shape, a)
    n, h, w = shape[0], shape[2], shape[3]
    sb, db = block_of(a["src_layout"]), block_of(a["dst_layout"])
    if sb and not (shape[1] - 1) * sb < c <= shape[1] * sb:
        raise ValueError(f"{shape[1]} blocks of {sb} do not hold {c} channels")
    if not sb and shape[1] != c:
        raise ValueError(f"a {shape[1]}-channel tensor moved as {c} channels")
    return (n, round_up(c, db) // db, h, w, db) if db else (n, c, h, w)


def _lt_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data = x[0]
    in_shape = tuple(int(s) for s in data.shape)
    shape = _lt_infer([TensorType(in_shape)], a)
    sb, db = block_of(a["src_layout"]), block_of(a["dst_layout"])
    c_all = _channels(in_shape, a)

    def src(n: Any, c: Any, y: Any, w: Any) -> Any:
        return data[n, c // sb, y, w, c % sb] if sb else data[n, c, y, w]

    if db and c_all % db:
        def f(n: Any, c1: Any, y: Any, w: Any, c: Any) -> Any:
            # the lanes past the channels are zeros (the source may not hold them)
            return te.if_then_else(c1 * db + c < c_all, src(n, c1 * db + c, y, w),
                                   te.const(0.0, data.dtype))
    elif db:
        def f(n: Any, c1: Any, y: Any, w: Any, c: Any) -> Any:  # type: ignore[misc]
            return src(n, c1 * db + c, y, w)
    else:
        def f(n: Any, c: Any, y: Any, w: Any) -> Any:  # type: ignore[misc]
            return src(n, c, y, w)
    return te.compute(shape, f, name="layout_transform", tag="injective")


# NOTE: registered once, in .layout_transform, with the axis permutations ConvertLayout uses


def layout_transform(data: Expr, src_layout: str, dst_layout: str, channels: int = 0) -> Call:
    """``data`` re-laid from ``src_layout`` to ``dst_layout`` (TVM's ``layout_transform``);
    ``channels``: the channels it holds, where a block does not divide them (0: all)."""
    if not channels:
        return make_call("layout_transform", [data], src_layout=src_layout,
                         dst_layout=dst_layout)
    return make_call("layout_transform", [data], src_layout=src_layout, dst_layout=dst_layout,
                     channels=int(channels))


def _window_out(h: int, w: int, kh: int, kw: int, a: dict[str, Any]) -> tuple[int, int]:
    """Output height and width of a ``kh x kw`` window over ``h x w`` with ``a``'s padding
    ``(top, left, bottom, right)`` and strides."""
    pt, pl, pb, pr = a["padding"]
    sh, sw = a["strides"]
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"window {kh}x{kw} does not fit {h}x{w}")
    return oh, ow


def _pad_blocked(data: te.Tensor, pads: tuple[int, int, int, int]) -> te.Tensor:
    """``data`` (NCHW[x]c) zero-padded by ``(top, left, bottom, right)`` in H and W."""
    pt, pl, pb, pr = pads
    n, c1, h, w, ib = (int(d) for d in data.shape)
    return te.compute(
        (n, c1, h + pt + pb, w + pl + pr, ib),
        lambda q, c, y, z, i: te.if_then_else(
            te.all(y >= pt, y < h + pt, z >= pl, z < w + pl),
            data[q, c, y - pt, z - pl, i], te.const(0.0, data.dtype)), name="data_pad")


# ---- conv2d_NCHWc -------------------------------------------------------------------------------
def _split_groups(data: tuple[int, ...], kernel: tuple[int, ...]) -> int:
    """The groups one block holds in a split-form kernel (:func:`pack_group_kernel`: its
    input-channel axis narrower than the data's block), 1 for any other."""
    n, c1, h, w, ib = data
    o1, i1, kh, kw, kib, ob = kernel
    if kib >= ib:
        return 1
    m = ib // kib
    if ib % kib or i1 != 1 or o1 != c1 or ob % m:
        raise ValueError(f"kernel {kernel} does not match data {data}")
    return m


def _group_geometry(data: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[int, int, int]:
    """``(groups, input blocks per group, output blocks per group)`` of a blocked convolution
    from its shapes: each output block reads the input blocks of its group (a split-form
    kernel's block holds several groups: ``groups`` counts them all, the blocks 1 and 1)."""
    n, c1, h, w, ib = data
    o1, i1, kh, kw, kib, ob = kernel
    m = _split_groups(data, kernel)
    if m > 1:
        return c1 * m, 1, 1
    if kib != ib or c1 % i1 or o1 % (c1 // i1):
        raise ValueError(f"kernel {kernel} does not match data {data}")
    g = c1 // i1
    return g, i1, o1 // g


def _conv_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    n, c1, h, w, ib = t[0].shape
    o1, i1, kh, kw, kib, ob = t[1].shape
    g, _, _ = _group_geometry(t[0].shape, t[1].shape)
    if a.get("groups", 1) % g:
        raise ValueError(f"kernel {t[1].shape} does not match data {t[0].shape} in "
                         f"{a.get('groups', 1)} groups")
    oh, ow = _window_out(h, w, kh, kw, a)
    return (n, o1, oh, ow, ob)


def _conv_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, kernel = x
    n, c1, h, w, ib = (int(s) for s in data.shape)
    o1, i1, kh, kw, kib, ob = (int(s) for s in kernel.shape)
    oh, ow = _window_out(h, w, kh, kw, a)
    sh, sw = a["strides"]
    g, _, og = _group_geometry((n, c1, h, w, ib), (o1, i1, kh, kw, kib, ob))
    m = ib // kib  # groups per block of a split-form kernel (1: any other)
    dpad = _pad_blocked(data, a["padding"])
    rco = te.reduce_axis((0, i1), name="rco")
    rci = te.reduce_axis((0, kib), name="rci")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def block(o: Any) -> Any:
        return rco if g == 1 else o // og * i1 + rco

    def lane(v: Any) -> Any:  # the input lane of output lane v's group
        return rci if m == 1 else v // (ob // m) * kib + rci

    return te.compute(
        (n, o1, oh, ow, ob),
        lambda b, o, y, z, v: te.sum(dpad[b, block(o), y * sh + ry, z * sw + rx, lane(v)]
                                     * kernel[o, rco, ry, rx, rci, v], axis=[rco, ry, rx, rci]),
        name="conv2d_NCHWc", tag="conv2d_NCHWc")


def _conv_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data, kernel = x
    o1, i1, kh, kw, kib, ob = kernel.shape
    g, _, _ = _group_geometry(data.shape, kernel.shape)
    if kib < data.shape[4]:  # split form: [o1, 1, kh, kw, cg, ob] -> grouped OIHW
        k = kernel.transpose(0, 5, 1, 4, 2, 3).reshape(o1 * ob, kib, kh, kw)
    else:
        k = kernel.transpose(0, 5, 1, 4, 2, 3).reshape(o1 * ob, i1 * kib, kh, kw)
    out = ref.conv2d_nchw_python(unpack_data(data), k, a["strides"], a["padding"], groups=g)
    return pack_data(out, ob)


register_op("nn.contrib_conv2d_NCHWc", ANCHOR, _conv_infer, _conv_compute, _conv_ref)


def conv2d_nchwc(data: Expr, kernel: Expr, strides: tuple[int, int],
                 padding: tuple[int, int, int, int], config: Any = None,
                 groups: int = 1, channels: tuple[int, int] | None = None) -> Call:
    """A convolution on ``NCHW{ib}c`` data with an ``OIHW{ib}i{ob}o`` kernel, giving
    ``NCHW{ob}c``; ``config`` is the AutoTVM config its template runs with (None: the one the
    dispatch context answers); ``groups``: the original convolution's (a grouped kernel is
    packed by :func:`pack_group_kernel`); ``channels``: its ``(input, output)`` channels
    where a block does not divide them (the blocks hold zeros past them)."""
    ib, ob = data.shape[4], kernel.shape[5]
    extra = {} if channels is None else {"in_channels": int(channels[0]),
                                         "channels": int(channels[1])}
    return make_call("nn.contrib_conv2d_NCHWc", [data, kernel], strides=tuple(strides),
                     padding=tuple(padding), groups=int(groups), data_layout=blocked(ib),
                     kernel_layout=f"OIHW{ib}i{ob}o", out_layout=blocked(ob),
                     autotvm_config=config, **extra)


# ---- depthwise conv2d on NCHW{b}c ---------------------------------------------------------------
def pack_depthwise_kernel(k: np.ndarray, b: int) -> np.ndarray:
    """``[C, 1, KH, KW]`` -> ``[C/b, 1, KH, KW, 1, b]`` (TVM's ``OIHW1i{b}o``; zero weights
    past the channels)."""
    k = _pad_axis(k, 0, round_up(k.shape[0], b))
    c, _, kh, kw = k.shape
    return np.ascontiguousarray(k.reshape(c // b, b, 1, kh, kw).transpose(0, 2, 3, 4, 1)
                                .reshape(c // b, 1, kh, kw, 1, b))


def _dw_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    n, c1, h, w, b = t[0].shape
    k1, _, kh, kw, _, kb = t[1].shape
    if (k1, kb) != (c1, b):
        raise ValueError(f"kernel {t[1].shape} does not match data {t[0].shape}")
    oh, ow = _window_out(h, w, kh, kw, a)
    return (n, c1, oh, ow, b)


def _dw_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, kernel = x
    n, c1, oh, ow, b = _dw_infer([TensorType(tuple(int(s) for s in data.shape)),
                                  TensorType(tuple(int(s) for s in kernel.shape))], a)
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    sh, sw = a["strides"]
    dpad = _pad_blocked(data, a["padding"])
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, c1, oh, ow, b),
        lambda q, c, y, z, v: te.sum(dpad[q, c, y * sh + ry, z * sw + rx, v]
                                     * kernel[c, 0, ry, rx, 0, v], axis=[ry, rx]),
        name="DepthwiseConv2d_NCHWc", tag="depthwise_conv2d_NCHWc")


def _dw_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data, kernel = x
    c1, _, kh, kw, _, b = kernel.shape
    k = kernel.reshape(c1, kh, kw, b).transpose(0, 3, 1, 2).reshape(c1 * b, 1, kh, kw)
    out = ref.conv2d_nchw_python(unpack_data(data), k, a["strides"], a["padding"],
                                 groups=c1 * b)
    return pack_data(out, b)


register_op("nn.contrib_depthwise_conv2d_NCHWc", ANCHOR, _dw_infer, _dw_compute, _dw_ref)


def depthwise_conv2d_nchwc(data: Expr, kernel: Expr, strides: tuple[int, int],
                           padding: tuple[int, int, int, int]) -> Call:
    """A depthwise convolution on ``NCHW{b}c`` data with an ``OIHW1i{b}o`` kernel."""
    b = data.shape[4]
    return make_call("nn.contrib_depthwise_conv2d_NCHWc", [data, kernel],
                     strides=tuple(strides), padding=tuple(padding), data_layout=blocked(b),
                     kernel_layout=f"OIHW1i{b}o", out_layout=blocked(b))
