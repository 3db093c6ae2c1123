"""x86 direct ``conv2d_nchw`` vectorized along the output width (``conv2d_nchw_wvec``).

For layers with few input channels (the ResNet stem: 3 channels, 7x7, stride 2) the reduction
of the channel-vectorized ``conv2d_nchw`` template is tiny and its packed output must be
unpacked to NCHW. This variant keeps NCHW everywhere and vectorizes the output width instead:

* ``data_poly[N, CI, sw, H+pad, ceil]``: the zero-padded data split into its ``sw`` column
  phases (``data_poly[.., p, y, q] = pad(data)[.., y, q * sw + p]``), so the input columns of
  ``W`` consecutive outputs at tap ``rx`` (``x * sw + rx``) are ``W`` consecutive floats of
  phase ``rx % sw`` starting at ``x + rx // sw``: one unaligned vector load, no gather;
* ``output[N, CO, OH, OW]``: each ``C x R x W`` block (output channels, rows, columns)
  accumulates in a register-resident write cache over ``(ci, kh, kw)``; the kernel taps are
  unrolled (``kw`` by a knob) so the phase and offset of each load are constants; each kernel
  weight is broadcast once per ``(ci, kh, kw)`` and feeds ``R * W / lanes`` FMAs; the block is
  stored straight into the NCHW output (contiguous rows), so nothing is unpacked.

The OIHW kernel is read in place (``C`` scalar broadcasts per tap, ``C * CI * KH * KW`` floats
per block, L1 resident), so no weight repacking happens per call.

Knobs: ``tile_oc`` ``[co_o, C]`` (``C <= 16``), ``tile_oh`` ``[oh_o, R]`` (``R <= 4``),
``tile_ow`` ``[ow_o, W]`` (``W`` a multiple of 8 dividing the width, or the whole width when
it has none: a vector tail de-vectorizes the block), ``unroll_kw``, ``rows_outer`` (the
parallel loop runs over row blocks, then channel blocks, or the other way round). ``multi_filter`` keeps
blocks whose accumulators and data vectors fit the target's vector registers
(:func:`~._common.target_vector`).
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, output_stage
from templtune.autotvm.strategy import TemplateInfo

from .._strategy import CONV_PARAMS, KEYS, conv_nchw_args, is_conv
from ._common import (
    check_positive,
    pad_tuple,
    stride_pair,
    target_vector,
    vec_regs,
)
from .conv2d_nchw import out_size


def _width_split_ok(ow: int) -> Any:
    """A ``define_split`` filter for the vectorized width: multiples of 8 dividing ``ow`` up
    to 64, or ``ow`` itself when it has none."""
    has_mult8 = any(ow % d == 0 for d in range(8, 65, 8))

    def keep(e: Any) -> bool:
        w = int(e.size[-1])
        if has_mult8:
            return w % 8 == 0 and w <= 64
        return w == ow

    return keep


def fits_registers(c: int, r: int, w: int, lanes: int, regs: int) -> bool:
    """Whether a ``c x r x w`` block fits: ``c * r * ceil(w / lanes)`` accumulators within
    ``regs``, plus one row's data vectors and a broadcast within the register file
    (``regs + 4``)."""
    per_row = vec_regs(w, lanes)
    acc = c * r * per_row
    return acc <= regs and acc + per_row + 1 <= regs + 4


def _define(cfg: Any, co: int, oh: int, ow: int) -> None:
    lanes, regs = target_vector()
    cfg.define_split("tile_oc", co, num_outputs=2, filter=lambda e: int(e.size[-1]) <= 16)
    cfg.define_split("tile_oh", oh, num_outputs=2, filter=lambda e: int(e.size[-1]) <= 4)
    cfg.define_split("tile_ow", ow, num_outputs=2, filter=_width_split_ok(ow))
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("rows_outer", [True, False])
    cfg.multi_filter(lambda e: fits_registers(e["tile_oc"].size[-1], e["tile_oh"].size[-1],
                                              e["tile_ow"].size[-1], lanes, regs))
    if cfg.is_fallback:
        c, r, w = fallback_block(co, oh, ow, lanes, regs)
        cfg.fallback_split("tile_oc", [-1, c])
        cfg.fallback_split("tile_oh", [-1, r])
        cfg.fallback_split("tile_ow", [-1, w])


def fallback_block(co: int, oh: int, ow: int, lanes: int, regs: int) -> tuple[int, int, int]:
    """``(C, R, W)`` for the fallback: two vectors of width per row, then as many output
    channels as leave eight accumulators (fuller 12-accumulator blocks need more broadcasts
    than their extra chains hide)."""
    ws = [d for d in range(8, min(ow, 64) + 1, 8) if ow % d == 0] or [ow]
    w = min(ws, key=lambda d: (abs(vec_regs(d, lanes) - 2), -d))
    per_row = vec_regs(w, lanes)
    best = (0, 1, 1)
    for c in (d for d in range(1, min(co, 16) + 1) if co % d == 0):
        for r in (d for d in range(1, min(oh, 4) + 1) if oh % d == 0):
            acc = c * r * per_row
            if acc <= 8 and fits_registers(c, r, w, lanes, regs) and (acc, c) > best[:2]:
                best = (acc, c, r)
    return best[1], best[2], w


def _conv2d_nchw_wvec(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
                      padding: Any, *, epilogue: Epilogue | None = None
                      ) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, output])`` for the current config.

    Arguments as ``conv2d_nchw``: batch, input height/width, output and input channels, kernel
    height/width, stride and padding (int, pair or 4-tuple); NCHW data, OIHW kernel, NCHW
    output. ``epilogue`` (a fused element-wise tail) is applied to each register block as it is
    written out; the arguments are then ``[data, kernel, *epilogue inputs, fused output]``.
    """
    check_positive(N=N, H=H, W=W, CO=CO, CI=CI, KH=KH, KW=KW)
    sh, sw = stride_pair(stride)
    pt, pl, pb, pr = pad_tuple(padding)
    oh = out_size(H, KH, pt, pb, sh)
    ow = out_size(W, KW, pl, pr, sw)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d_nchw_wvec: empty output ({oh}x{ow}) for a {H}x{W} input")
    cfg = autotvm.get_config()
    _define(cfg, CO, oh, ow)
    cfg.add_flop(2.0 * N * CO * oh * ow * CI * KH * KW)
    c_bn = cfg["tile_oc"].size[-1]
    r_bn = cfg["tile_oh"].size[-1]
    w_bn = cfg["tile_ow"].size[-1]
    lanes, _ = target_vector()

    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    hp = H + pt + pb
    # NOTE: the phases hold exactly the columns the outputs read: x + rx // sw < ow + (KW-1)//sw.
    qn = ow + (KW - 1) // sw
    poly = te.compute(
        (N, CI, sw, hp, qn),
        lambda n, c, p, y, q: te.if_then_else(
            te.all(y >= pt, y < H + pt, q * sw + p >= pl, q * sw + p < W + pl),
            data[n, c, y - pt, q * sw + p - pl], te.const(0.0, data.dtype)),
        name="data_poly")
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    output = te.compute(
        (N, CO, oh, ow),
        lambda n, co, y, x: te.sum(poly[n, rc, rx % sw, y * sh + ry, x + rx // sw]
                                   * kernel[co, rc, ry, rx], axis=[rc, ry, rx]),
        name="output")
    tail = attach(output, epilogue)
    s = te.create_schedule(tail.output.op)
    output, acc = output_stage(s, tail)

    pn, pc, pp, py, _ = s[poly].op.axis
    s[poly].parallel(s[poly].fuse(pn, pc, pp, py))

    n, co, y, x = s[output].op.axis
    coo, coi = s[output].split(co, factor=c_bn)
    yo, yi = s[output].split(y, factor=r_bn)
    xo, xi = s[output].split(x, factor=w_bn)
    if cfg["rows_outer"].val:
        # NOTE: all channel blocks of one row block in turn: the data rows they read (CI x KH
        # rows) stay in L1 instead of the whole padded input streaming from L3 per block.
        s[output].reorder(n, yo, coo, xo, coi, yi, xi)
        s[output].parallel(s[output].fuse(n, yo, coo))
    else:
        s[output].reorder(n, coo, yo, xo, coi, yi, xi)
        s[output].parallel(s[output].fuse(n, coo, yo))
    s[output].unroll(coi)
    s[output].unroll(yi)
    if w_bn % lanes == 0:
        xio, xii = s[output].split(xi, factor=lanes)
        s[output].vectorize(xii)
    else:
        s[output].vectorize(xi)

    s[acc].compute_at(s[output], xo)
    _, aco, ay, ax = s[acc].op.axis
    arc, ary, arx = s[acc].op.reduce_axis
    s[acc].reorder(arc, ary, arx, aco, ay, ax)
    # NOTE: with rx unrolled, rx % sw and rx // sw fold to constants in each copy.
    if cfg["unroll_kw"].val:
        s[acc].unroll(arx)
    s[acc].unroll(aco)
    s[acc].unroll(ay)
    if w_bn % lanes == 0:
        axo, axi = s[acc].split(ax, factor=lanes)
        s[acc].unroll(axo)
        s[acc].vectorize(axi)
    else:
        s[acc].vectorize(ax)
    return s, [data, kernel, *tail.extras, output]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
conv2d_nchw_wvec = autotvm.template("conv2d_nchw_wvec")(_conv2d_nchw_wvec)
conv2d_nchw_wvec_x86 = autotvm.template("conv2d_nchw_wvec.x86")(_conv2d_nchw_wvec)


# ---- strategy and catalogue ---------------------------------------------------------------------
strategy.register("nn.conv2d", KEYS, "conv2d_nchw_wvec", plevel=5,
                  when=lambda call: is_conv(call, "NCHW"),
                  workloads=lambda call: [conv_nchw_args(call)], epilogue=True)
strategy.catalog(TemplateInfo(
    "conv2d_nchw_wvec", "x86", CONV_PARAMS, (1, 224, 224, 64, 3, 7, 7, 2, 3),
    "direct conv2d, NCHW data / OIHW kernel / NCHW output, vectorized along the output width "
    "(few input channels: the ResNet stem)"))
