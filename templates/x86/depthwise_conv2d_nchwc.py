"""x86 ``depthwise_conv2d_NCHWc`` template: a depthwise convolution on blocked activations
(TVM's ``depthwise_conv2d_NCHWc.x86``).

Layouts (the network's alter-layout pass keeps its input's blocking through it):

* data ``[N, C/b, H, W, b]`` (``NCHW{b}c``);
* kernel ``[C/b, 1, KH, KW, 1, b]`` (``OIHW1i{b}o``), packed once when the network is built;
* output ``[N, C/b, OH, OW, b]``, the same blocking.

Unlike ``conv2d_NCHWc`` the channel block ``b`` is not a knob: the graph fixes it (the input
arrives in the previous layer's blocking and a depthwise conv has no reduction over channels
to re-block), so it is the last task argument and every record is for one blocking.

The inner block is ``oh_bn`` rows x ``ow_bn`` pixels x ``c_bn`` channels of accumulators
(``oh_bn * ow_bn * c_bn / lanes`` vector registers, at most the capability record's
accumulator registers): every kernel tap is unrolled and adds one FMA per accumulator
vector, the tap's weight vector shared by the block's pixels and each input vector by the
taps that read it. ``c_bn`` (``tile_c``) splits the graph's block into whole registers.
Knobs: ``tile_ow`` ``[ow_o, ow_bn]``, ``tile_oh`` ``[oh_o, oh_bn]`` (``oh_bn <= 4``),
``tile_c`` ``[b / c_bn, c_bn]``.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, output_stage
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import KEYS, scalar
from ._common import (
    FMA_CHAINS,
    check_positive,
    host_vector,
    inner_sizes,
    max_inner,
    pad_tuple,
    stride_pair,
    target_vector,
    vec_regs,
)

TEMPLATE = "depthwise_conv2d_NCHWc"
#: the network op this template implements (TVM's name)
OP = "nn.contrib_depthwise_conv2d_NCHWc"
#: the longest output row block and the most rows a register block spans
OW_CAP, OH_CAP = 32, 4


def out_size(size: int, k: int, lo: int, hi: int, s: int) -> int:
    return (size + lo + hi - k) // s + 1


def channel_blocks(block: int, lanes: int) -> list[int]:
    """The channel sub-blocks ``c_bn`` of a ``block``-channel layout: whole registers of
    ``lanes`` dividing ``block`` (the block itself when it is one register or less)."""
    whole = [c for c in range(lanes, block + 1, lanes) if block % c == 0]
    return whole or [block]


def _acc(e: Any, lanes: int) -> int:
    """Accumulator registers of a config's block."""
    return (e["tile_oh"].size[-1] * e["tile_ow"].size[-1]
            * vec_regs(e["tile_c"].size[-1], lanes))


def fallback_block(oh: int, ow: int, block: int, lanes: int, regs: int, floor: int = 1,
                   prefer: int = 0) -> tuple[int, int, int]:
    """``(oh_bn, ow_bn, c_bn)`` of a fallback config, a point of the space (at least
    ``floor`` accumulators, at most ``regs``): the narrowest channel sub-block that has a
    block of ``floor`` to ``prefer`` accumulators (default half the ``regs``), its largest
    such block, the longer row first (8-14 chains cover the FMA latency; a depthwise block
    has no reduction over channels to amortize a larger one); else the smallest block of
    ``floor``."""
    target = max(prefer or regs // 2, floor)
    ohs = inner_sizes(oh, max_inner(OH_CAP))
    ows = inner_sizes(ow, max_inner(OW_CAP))
    blocks = [(h * w * vec_regs(c, lanes), c, h, w) for c in channel_blocks(block, lanes)
              for h in ohs for w in ows]
    for c_bn in channel_blocks(block, lanes):
        fit = [(a, w, h) for a, c, h, w in blocks if c == c_bn and floor <= a <= target]
        if fit:
            _, w, h = max(fit)
            return h, w, c_bn
    _, c, h, w = min(((a, c, h, -w) for a, c, h, w in blocks if floor <= a <= regs),
                     default=(1, min(channel_blocks(block, lanes)), 1, -1))
    return h, -w, c


def _define(cfg: Any, oh: int, ow: int, block: int) -> None:
    lanes, regs = target_vector()
    cblocks = channel_blocks(block, lanes)
    cfg.define_split("tile_ow", ow, num_outputs=2, filter=max_inner(OW_CAP))
    cfg.define_split("tile_oh", oh, num_outputs=2, filter=max_inner(OH_CAP))
    cfg.define_split("tile_c", block, num_outputs=2, filter=lambda e: e.size[-1] in cblocks)
    # NOTE: the block's accumulators stay in registers; blocks of fewer than FMA_CHAINS
    # leave the FMA pipes waiting on one chain (unless no block of this layer has that many)
    sizes = [h * w * vec_regs(c, lanes) for h in inner_sizes(oh, max_inner(OH_CAP))
             for w in inner_sizes(ow, max_inner(OW_CAP)) for c in cblocks]
    floor = min(FMA_CHAINS, max([a for a in sizes if a <= regs], default=1))
    cfg.multi_filter(lambda e: floor <= _acc(e, lanes) <= regs)
    if cfg.is_fallback:
        # NOTE: the space's bounds (the target's registers), the host's fallback share
        _, fregs = host_vector()
        oh_bn, ow_bn, c_bn = fallback_block(oh, ow, block, lanes, regs, floor, fregs // 2)
        cfg.fallback_split("tile_ow", [-1, ow_bn])
        cfg.fallback_split("tile_oh", [-1, oh_bn])
        cfg.fallback_split("tile_c", [-1, c_bn])


def _depthwise_conv2d_nchwc(N: int, H: int, W: int, C: int, KH: int, KW: int, stride: Any,
                            padding: Any, block: int, *, epilogue: Epilogue | None = None
                            ) -> tuple[Any, list[Any]]:
    """``(schedule, [data, kernel, output])`` of a depthwise conv in ``NCHW{block}c``.

    Arguments: batch, input height/width, channels ``C`` (a multiple of ``block``), kernel
    height/width, stride, padding, and the graph's channel block. ``epilogue`` (a fused
    element-wise tail on the blocked output: bias, relu, clip) is computed on each register
    block as it is stored; the arguments are then ``[data, kernel, *epilogue inputs, fused
    output]``.

    Raises
    ------
    ValueError
        A non-positive size, ``block`` not dividing ``C``, or an empty output.
    """
    check_positive(N=N, H=H, W=W, C=C, KH=KH, KW=KW, block=block)
    if C % block:
        raise ValueError(f"{TEMPLATE}: block {block} does not divide the {C} channels")
    sh, sw = stride_pair(stride)
    pt, pl, pb, pr = pad_tuple(padding)
    oh, ow = out_size(H, KH, pt, pb, sh), out_size(W, KW, pl, pr, sw)
    if oh < 1 or ow < 1:
        raise ValueError(f"{TEMPLATE}: empty output ({oh}x{ow}) for a {H}x{W} input")
    cfg = autotvm.get_config()
    _define(cfg, oh, ow, block)
    cfg.add_flop(2.0 * N * C * oh * ow * KH * KW)
    ow_bn, oh_bn = cfg["tile_ow"].size[-1], cfg["tile_oh"].size[-1]
    c_bn = cfg["tile_c"].size[-1]

    cb = C // block
    data = te.placeholder((N, cb, H, W, block), name="data")
    kernel = te.placeholder((cb, 1, KH, KW, 1, block), name="kernel")
    if pt or pl or pb or pr:
        dpad = te.compute(
            (N, cb, H + pt + pb, W + pl + pr, block),
            lambda n, c, y, x, i: te.if_then_else(
                te.all(y >= pt, y < H + pt, x >= pl, x < W + pl),
                data[n, c, y - pt, x - pl, i], te.const(0.0, data.dtype)),
            name="data_pad")
    else:
        dpad = data
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    conv = te.compute(
        (N, cb, oh, ow, block),
        lambda n, c, y, x, v: te.sum(dpad[n, c, y * sh + ry, x * sw + rx, v]
                                     * kernel[c, 0, ry, rx, 0, v], axis=[ry, rx]),
        name="DepthwiseConv2d_NCHWc", tag="depthwise_conv2d_NCHWc")
    tail = attach(conv, epilogue)
    s = te.create_schedule(tail.output.op)
    if dpad is not data:
        # NOTE: padding inline: each tap's load is masked at the border (a zeroing masked
        # load with AVX-512), instead of a padded copy costing another pass over memory
        s[dpad].compute_inline()

    # NOTE: the register block (oh_bn x ow_bn pixels x c_bn channels) accumulates over the
    # unrolled taps, then is stored once through the epilogue; its channel sub-blocks sit
    # innermost of the outer loops, so the cache lines of a pixel's block are read together.
    out, acc = output_stage(s, tail)
    n, c, y, x, v = s[out].op.axis
    yo, yi = s[out].split(y, factor=oh_bn)
    xo, xi = s[out].split(x, factor=ow_bn)
    vo, vi = s[out].split(v, factor=c_bn)
    s[out].reorder(n, c, yo, xo, vo, yi, xi, vi)
    s[out].parallel(s[out].fuse(n, c, yo))
    s[out].vectorize(vi)
    s[acc].compute_at(s[out], vo)
    _, _, ay, ax, av = s[acc].op.axis
    ary, arx = s[acc].op.reduce_axis
    # NOTE: taps outermost: each accumulator's chain is the KH*KW taps, the block's
    # accumulators independent chains between them
    s[acc].reorder(ary, arx, ay, ax, av)
    for a in (ary, arx, ay, ax):
        s[acc].unroll(a)
    s[acc].vectorize(av)
    return s, [data, kernel, *tail.extras, out]


depthwise_conv2d_NCHWc = autotvm.template(TEMPLATE)(_depthwise_conv2d_nchwc)
depthwise_conv2d_NCHWc_x86 = autotvm.template(f"{TEMPLATE}.x86")(_depthwise_conv2d_nchwc)


# ---- strategy and catalogue ---------------------------------------------------------------------
def logical_args(call: OpCall) -> tuple[Any, ...]:
    """``(N, H, W, C, KH, KW, stride, padding, block)`` of a blocked depthwise call (5-D data,
    6-D ``OIHW1i{b}o`` kernel)."""
    n, cb, h, w, b = call.inputs[0]
    kh, kw = call.inputs[1][2], call.inputs[1][3]
    return (n, h, w, cb * b, kh, kw, scalar(call.attr("strides")),
            scalar(call.attr("padding")), b)


def _when(call: OpCall) -> bool:
    return (call.dtype == "float32" and len(call.inputs) == 2 and len(call.inputs[0]) == 5
            and len(call.inputs[1]) == 6)


strategy.register(OP, KEYS, TEMPLATE, plevel=10, when=_when,
                  workloads=lambda call: [logical_args(call)], epilogue=True)
strategy.catalog(TemplateInfo(
    TEMPLATE, "x86", ("N", "H", "W", "C", "KH", "KW", "stride", "padding", "block"),
    (1, 56, 56, 128, 3, 3, 1, 1, 32),
    "depthwise conv2d on NCHW[block]c data, OIHW1i[block]o kernel, the same blocking out "
    "(the graph's block is an argument)"))
