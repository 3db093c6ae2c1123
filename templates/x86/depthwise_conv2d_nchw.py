"""x86 ``depthwise_conv2d_nchw`` template (NCHW data, ``[C, M, KH, KW]`` filter).

Each output channel is a small 2-D correlation, so the output width is the vector axis: an
``oh_bn x ow_bn`` block accumulates in a write cache over the unrolled ``(kh, kw)`` taps, rows
unrolled and ``ow_bn`` columns vectorized (``ow_bn`` a multiple of 8 where the width allows);
the fused ``(n, c)`` loop runs in parallel. The padded input is materialized, or computed inline
(``inline_pad``).

Knobs: ``tile_oh`` ``[oh_o, oh_bn]`` (``<= 8``), ``tile_ow`` ``[ow_o, ow_bn]`` (``<= 64``),
``inline_pad``.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, output_stage
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import KEYS, is_conv, scalar
from ._common import (
    check_positive,
    divisor_at_most,
    lane_filter,
    max_inner,
    pad_nchw,
    pad_tuple,
    stride_pair,
    target_vector,
    vec_regs,
    vector_divisor,
)
from .conv2d_nchw import out_size


def _define(cfg: Any, oh: int, ow: int, padded: bool) -> None:
    cfg.define_split("tile_oh", oh, num_outputs=2, filter=max_inner(8))
    cfg.define_split("tile_ow", ow, num_outputs=2, filter=lane_filter(ow))
    cfg.define_knob("inline_pad", [False, True] if padded else [False])
    lanes, regs = target_vector()
    # NOTE: the oh_bn x ow_bn block's accumulators fit the target's vector registers.
    cfg.multi_filter(lambda e: e["tile_oh"].size[-1] * vec_regs(e["tile_ow"].size[-1], lanes)
                     <= regs)
    if cfg.is_fallback:
        bw = vector_divisor(ow, 32)
        cfg.fallback_split("tile_ow", [-1, bw])
        cfg.fallback_split("tile_oh", [-1, divisor_at_most(oh, max(1, 64 // bw))])


def _depthwise_conv2d_nchw(N: int, H: int, W: int, C: int, M: int, KH: int, KW: int,
                          stride: Any, padding: Any, *, epilogue: Epilogue | None = None
                          ) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, filter, output])`` for the current config.

    ``C`` input channels, channel multiplier ``M`` (``C * M`` output channels). ``epilogue``
    (a fused element-wise tail) is applied to each register block as it is written out; the
    arguments are then ``[data, filter, *epilogue inputs, fused output]``.
    """
    check_positive(N=N, H=H, W=W, C=C, M=M, KH=KH, KW=KW)
    sh, sw = stride_pair(stride)
    pads = pad_tuple(padding)
    oh = out_size(H, KH, pads[0], pads[2], sh)
    ow = out_size(W, KW, pads[1], pads[3], sw)
    if oh < 1 or ow < 1:
        raise ValueError(f"depthwise_conv2d_nchw: empty output ({oh}x{ow}) for {H}x{W}")
    cfg = autotvm.get_config()
    _define(cfg, oh, ow, any(pads))
    cfg.add_flop(2.0 * N * C * M * oh * ow * KH * KW)
    oh_bn = cfg["tile_oh"].size[-1]
    ow_bn = cfg["tile_ow"].size[-1]

    data = te.placeholder((N, C, H, W), name="data")
    filt = te.placeholder((C, M, KH, KW), name="filter")
    dpad = pad_nchw(data, pads)
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out = te.compute(
        (N, C * M, oh, ow),
        lambda b, c, i, j: te.sum(dpad[b, c // M, i * sh + ry, j * sw + rx]
                                  * filt[c // M, c % M, ry, rx], axis=[ry, rx]),
        name="output")
    tail = attach(out, epilogue)
    s = te.create_schedule(tail.output.op)
    if dpad is not data:
        if cfg["inline_pad"].val:
            s[dpad].compute_inline()
        else:
            pn, pc, _, _ = s[dpad].op.axis
            s[dpad].parallel(s[dpad].fuse(pn, pc))

    out, acc = output_stage(s, tail)
    b, c, i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=oh_bn)
    jo, ji = s[out].split(j, factor=ow_bn)
    s[out].reorder(b, c, io, jo, ii, ji)
    s[out].parallel(s[out].fuse(b, c))
    s[out].vectorize(ji)
    s[acc].compute_at(s[out], jo)
    _, _, ai, aj = s[acc].op.axis
    ary, arx = s[acc].op.reduce_axis
    s[acc].reorder(ary, arx, ai, aj)
    s[acc].unroll(ary)
    s[acc].unroll(arx)
    s[acc].unroll(ai)
    s[acc].vectorize(aj)
    return s, [data, filt, *tail.extras, out]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
depthwise_conv2d_nchw = autotvm.template("depthwise_conv2d_nchw")(_depthwise_conv2d_nchw)
depthwise_conv2d_nchw_x86 = autotvm.template("depthwise_conv2d_nchw.x86")(_depthwise_conv2d_nchw)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    n, ci, h, w = call.inputs[0]
    co, _, kh, kw = call.inputs[1]
    if co != ci:  # a channel multiplier above 1 is not a graph-level depthwise op here
        return []
    return [(n, h, w, ci, 1, kh, kw, scalar(call.attr("strides")), scalar(call.attr("padding")))]


strategy.register("nn.conv2d", KEYS, "depthwise_conv2d_nchw", plevel=10,
                  when=lambda call: is_conv(call, "NCHW", depthwise=True), workloads=_workloads,
                  epilogue=True)
strategy.catalog(TemplateInfo(
    "depthwise_conv2d_nchw", "x86", ("N", "H", "W", "C", "M", "KH", "KW", "stride", "padding"),
    (1, 56, 56, 64, 1, 3, 3, 1, 1), "depthwise conv2d, NCHW, [C, M, KH, KW]"))
