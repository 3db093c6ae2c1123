"""x86 direct ``conv2d_nhwc`` template (NHWC data, HWIO kernel, NHWC output).

Output channels are innermost in both the kernel and the output, so no packing is needed: each
``oh_bn x ow_bn x bn`` output block accumulates in a register-resident write cache over
``(ci_o, kh, kw, ci_i)`` with ``bn`` channels vectorized (one vector load of the kernel per
tap, one broadcast of the input), rows and columns unrolled; the fused
``(n, oh_o, co_o)`` loop runs in parallel. The padded input is materialized when there is
padding.

Knobs: ``tile_oc`` ``[co_o, bn]``, ``tile_oh`` ``[oh_o, oh_bn]``, ``tile_ow`` ``[ow_o, ow_bn]``,
``tile_ic`` ``[ci_o, ci_i]``, ``unroll_kw``.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, output_stage
from templtune.autotvm.strategy import TemplateInfo

from .._strategy import CONV_PARAMS, KEYS, conv_nhwc_args, is_conv
from ._common import check_positive, pad_tuple, stride_pair
from .conv2d_nchw import _define, _register_tile, out_size


def _conv2d_nhwc(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
                padding: Any, *, epilogue: Epilogue | None = None) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, output])`` for the current config
    (arguments as :func:`conv2d_nchw`; ``data`` is NHWC, ``kernel`` HWIO). ``epilogue`` (a
    fused element-wise tail) is applied to each register block as it is written out; the
    arguments are then ``[data, kernel, *epilogue inputs, fused output]``."""
    check_positive(N=N, H=H, W=W, CO=CO, CI=CI, KH=KH, KW=KW)
    sh, sw = stride_pair(stride)
    pt, pl, pb, pr = pad_tuple(padding)
    oh = out_size(H, KH, pt, pb, sh)
    ow = out_size(W, KW, pl, pr, sw)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d_nhwc: empty output ({oh}x{ow}) for a {H}x{W} input")
    cfg = autotvm.get_config()
    _define(cfg, CO, oh, ow, CI, 0, KW)
    cfg.add_flop(2.0 * N * CO * oh * ow * CI * KH * KW)
    bn = cfg["tile_oc"].size[-1]
    oh_bn = cfg["tile_oh"].size[-1]
    ow_bn = cfg["tile_ow"].size[-1]
    ci_i = cfg["tile_ic"].size[-1]

    data = te.placeholder((N, H, W, CI), name="data")
    kernel = te.placeholder((KH, KW, CI, CO), name="kernel")
    if pt or pl or pb or pr:
        dpad = te.compute(
            (N, H + pt + pb, W + pl + pr, CI),
            lambda n, y, x, c: te.if_then_else(
                te.all(y >= pt, y < H + pt, x >= pl, x < W + pl),
                data[n, y - pt, x - pl, c], te.const(0.0, "float32")),
            name="data_pad")
    else:
        dpad = data
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out = te.compute(
        (N, oh, ow, CO),
        lambda n, y, x, f: te.sum(dpad[n, y * sh + ry, x * sw + rx, rc] * kernel[ry, rx, rc, f],
                                  axis=[rc, ry, rx]),
        name="output")
    tail = attach(out, epilogue)
    s = te.create_schedule(tail.output.op)
    if dpad is not data:
        pn, py, _, _ = s[dpad].op.axis
        s[dpad].parallel(s[dpad].fuse(pn, py))

    out, acc = output_stage(s, tail)
    n, y, x, f = s[out].op.axis
    yo, yi = s[out].split(y, factor=oh_bn)
    xo, xi = s[out].split(x, factor=ow_bn)
    fo, fi = s[out].split(f, factor=bn)
    s[out].reorder(n, yo, fo, xo, yi, xi, fi)
    s[out].parallel(s[out].fuse(n, yo, fo))
    s[out].vectorize(fi)
    s[acc].compute_at(s[out], xo)
    _, ay, ax, af = s[acc].op.axis
    arc, ary, arx = s[acc].op.reduce_axis
    rco, rci = s[acc].split(arc, factor=ci_i)
    s[acc].reorder(rco, ary, arx, rci, ay, ax, af)
    _register_tile(cfg, s[acc], ay, ax, arx, af)
    return s, [data, kernel, *tail.extras, out]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
conv2d_nhwc = autotvm.template("conv2d_nhwc")(_conv2d_nhwc)
conv2d_nhwc_x86 = autotvm.template("conv2d_nhwc.x86")(_conv2d_nhwc)


# ---- strategy and catalogue ---------------------------------------------------------------------
strategy.register("nn.conv2d", KEYS, "conv2d_nhwc", plevel=10,
                  when=lambda call: is_conv(call, "NHWC"), workloads=lambda call: [conv_nhwc_args(call)], epilogue=True)
strategy.catalog(TemplateInfo("conv2d_nhwc", "x86", CONV_PARAMS, (1, 56, 56, 64, 64, 3, 3, 1, 1),
                              "direct conv2d, NHWC data / HWIO kernel"))
