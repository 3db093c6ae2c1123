"""x86 direct ``conv2d_nchw`` template (spatial pack, NCHWc-style blocking inside the kernel).

Inputs are NCHW data and an OIHW kernel, the output is NCHW. Inside the kernel:

* ``data_vec[N, CI/ci_i, H+pad, W+pad, ci_i]``: the data zero-padded and packed NCHWc-style,
  so the innermost reduction (over ``ci_i``) reads consecutive floats;
* ``kernel_vec[CO/bn, CI/ci_i, KH, KW, ci_i, bn]``: the kernel packed so ``bn`` output channels
  are contiguous (one vector load per ``(ci_i, tap)``, consecutive in the inner loop);
* ``conv[N, CO/bn, OH, OW, bn]``: each ``oh_bn x ow_bn x bn`` output block accumulates in a
  register-resident write cache over ``(ci_o, kh, kw, ci_i)``; the block's rows and columns are
  unrolled and ``bn`` is vectorized;
* ``output``: NCHW; the packed ``conv`` of each ``(n, co_o, oh_o)`` block (one channel block,
  ``oh_bn`` rows) is computed inside the output's parallel loop over these blocks and unpacked
  while it is in L1.

Knobs: ``tile_oc`` ``[co_o, bn]``, ``tile_oh`` ``[oh_o, oh_bn]`` (``oh_bn <= 4``), ``tile_ow``
``[ow_o, ow_bn]`` (``ow_bn <= 32``), ``tile_ic`` ``[ci_o, ci_i]`` (``ci_i <= 64``),
``unroll_kw`` (unroll the kernel-width loop). ``multi_filter`` keeps blocks that fit the
target's vector register file with their operands (:func:`~._common.block_registers`: 32 zmm
with AVX-512, 16 ymm with AVX2) and have enough accumulators to cover the FMA latency
(:func:`~._common.chain_floor`).
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, inline_tail
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import (
    CONV_PARAMS,
    KEYS,
    conv_nchw_args,
    fallback_packed,
    is_conv,
    pack_blocks,
    pack_conv,
)
from ._common import (
    best_block,
    block_registers,
    chain_floor,
    check_positive,
    divisor_at_most,
    inner_sizes,
    interleaved_steps,
    lane_filter,
    max_inner,
    pad_tuple,
    register_file,
    stride_pair,
    target_vector,
    vec_regs,
)


def out_size(size: int, k: int, lo: int, hi: int, s: int) -> int:
    """Output extent of a convolution along one axis."""
    return (size + lo + hi - k) // s + 1


def _register_tile(cfg: Any, acc: Any, ay: Any, ax: Any, arx: Any, av: Any) -> None:
    """The accumulator's register block: rows ``ay`` and columns ``ax`` unrolled, the kernel
    width loop ``arx`` too when the ``unroll_kw`` knob says so, the channel lanes ``av``
    vectorized."""
    acc.unroll(ay)
    acc.unroll(ax)
    if cfg["unroll_kw"].val:
        acc.unroll(arx)
    acc.vectorize(av)


def _define(cfg: Any, co: int, oh: int, ow: int, ci: int, prepacked: int = 0, kw: int = 1
            ) -> None:
    if prepacked:
        cfg.define_split("tile_oc", co, num_outputs=2, policy="candidate",
                         candidate=[[co // prepacked, prepacked]])
    else:
        keep_oc = lane_filter(co, lanes=target_vector()[0])
        cfg.define_split("tile_oc", co, num_outputs=2, filter=keep_oc)
    cfg.define_split("tile_oh", oh, num_outputs=2, filter=max_inner(4))
    cfg.define_split("tile_ow", ow, num_outputs=2, filter=max_inner(32))
    cfg.define_split("tile_ic", ci, num_outputs=2, filter=max_inner(64))
    cfg.define_knob("unroll_kw", [True, False])
    lanes, _ = target_vector()
    nregs = register_file()
    widths = [prepacked] if prepacked else inner_sizes(co, keep_oc)
    rows = [y * x for y in range(1, min(oh, 4) + 1) if oh % y == 0
            for x in range(1, min(ow, 32) + 1) if ow % x == 0]
    floor = chain_floor([(r, vec_regs(b, lanes)) for r in rows for b in widths], nregs)

    # NOTE: the block (oh_bn * ow_bn broadcast rows x the bn lanes' registers) must fit the
    # register file with its operands, else the inner loop spills, and should cover the FMA
    # latency; a block of the whole output stays allowed (small layers).
    def fits(e: Any) -> bool:
        r = e["tile_oh"].size[-1] * e["tile_ow"].size[-1]
        nv = vec_regs(e["tile_oc"].size[-1], lanes)
        steps = interleaved_steps(e["tile_ic"].size[-1], kw if e["unroll_kw"].val else 1)
        return ((block_registers(r, nv, steps) <= nregs and r * nv >= max(floor, 2))
                or r == oh * ow)

    cfg.multi_filter(fits)
    if cfg.is_fallback:
        ci_i = divisor_at_most(ci, 16)
        bn, oh_bn, ow_bn = best_block(co, oh, ow, bns=[prepacked] if prepacked else None,
                                      steps=interleaved_steps(ci_i, kw))
        cfg.fallback_split("tile_oc", [-1, bn])
        cfg.fallback_split("tile_oh", [-1, oh_bn])
        cfg.fallback_split("tile_ow", [-1, ow_bn])
        cfg.fallback_split("tile_ic", [-1, ci_i])


def _conv2d_nchw(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
                 padding: Any, prepacked: int = 0, *, epilogue: Epilogue | None = None
                 ) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, output])`` for the current config.

    Arguments follow the seed tutorial: batch, input height/width, output and input channels,
    kernel height/width, stride and padding (int, pair or 4-tuple). ``prepacked=b > 0`` takes
    the kernel already packed to ``[CO/b, CI, KH, KW, b]`` (``k.reshape(CO // b, b, CI, KH,
    KW).transpose(0, 2, 3, 4, 1)``, done once for inference weights) and fixes ``bn = b``.
    ``epilogue`` (a fused element-wise tail) is computed where the block is unpacked to NCHW;
    the arguments are then ``[data, kernel, *epilogue inputs, fused output]``.
    """
    check_positive(N=N, H=H, W=W, CO=CO, CI=CI, KH=KH, KW=KW)
    if prepacked < 0 or (prepacked and CO % prepacked):
        raise ValueError(f"conv2d_nchw: prepacked must be 0 or a divisor of CO={CO}, "
                         f"got {prepacked}")
    sh, sw = stride_pair(stride)
    pads = pad_tuple(padding)
    oh = out_size(H, KH, pads[0], pads[2], sh)
    ow = out_size(W, KW, pads[1], pads[3], sw)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d_nchw: empty output ({oh}x{ow}) for a {H}x{W} input")
    cfg = autotvm.get_config()
    _define(cfg, CO, oh, ow, CI, prepacked, KW)
    cfg.add_flop(2.0 * N * CO * oh * ow * CI * KH * KW)
    bn = cfg["tile_oc"].size[-1]
    oh_bn = cfg["tile_oh"].size[-1]
    ow_bn = cfg["tile_ow"].size[-1]
    ci_i = cfg["tile_ic"].size[-1]

    data = te.placeholder((N, CI, H, W), name="data")
    rco = te.reduce_axis((0, CI // ci_i), name="rco")
    rci = te.reduce_axis((0, ci_i), name="rci")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    pt, pl, pb, pr = pads
    hp, wp = H + pt + pb, W + pl + pr
    # NOTE: NCHWc data: the inner reduction (ci_i) reads consecutive floats; the padding is
    # folded into this pack, so no separate padded copy is made.
    dvec = te.compute(
        (N, CI // ci_i, hp, wp, ci_i),
        lambda n, c, y, x, i: te.if_then_else(
            te.all(y >= pt, y < H + pt, x >= pl, x < W + pl),
            data[n, c * ci_i + i, y - pt, x - pl], te.const(0.0, data.dtype)),
        name="data_vec")
    if prepacked:
        kernel = te.placeholder((CO // bn, CI, KH, KW, bn), name="kernel")

        def kload(o, co_, ci_, y, x, v):
            return kernel[o, co_ * ci_i + ci_, y, x, v]
    else:
        kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
        # NOTE: OIHW{i}{o}: one vector load per (ci_i, tap), consecutive in the inner loop.
        kvec = te.compute((CO // bn, CI // ci_i, KH, KW, ci_i, bn),
                          lambda o, c, y, x, i, v: kernel[o * bn + v, c * ci_i + i, y, x],
                          name="kernel_vec")

        def kload(o, co_, ci_, y, x, v):
            return kvec[o, co_, y, x, ci_, v]
    conv = te.compute(
        (N, CO // bn, oh, ow, bn),
        lambda n, o, y, x, v: te.sum(dvec[n, rco, y * sh + ry, x * sw + rx, rci]
                                     * kload(o, rco, rci, ry, rx, v),
                                     axis=[rco, ry, rx, rci]),
        name="conv")
    output = te.compute((N, CO, oh, ow), lambda n, c, y, x: conv[n, c // bn, y, x, c % bn],
                        name="output")
    tail = attach(output, epilogue)
    s = te.create_schedule(tail.output.op)
    # NOTE: the unpack is inlined into the tail, so the block gets its bias/add/relu on the
    # way out of L1, in the same loop.
    inline_tail(s, tail, anchor_too=True)
    output = tail.output

    pn, pc, py, _, _ = s[dvec].op.axis
    s[dvec].parallel(s[dvec].fuse(pn, pc, py))
    # NOTE: read the OIHW kernel contiguously (v outside c, y, x); the strided writes of one
    # output-channel block stay in L2. Vectorizing v instead gathers one cache line per lane.
    if not prepacked:
        o, c, y, x, i, v = s[kvec].op.axis
        s[kvec].reorder(o, c, v, i, y, x)
        s[kvec].parallel(s[kvec].fuse(o, c))

    # NOTE: the packed result of one (channel block, row block) is unpacked to NCHW right
    # after it is computed, while it is in L1: no full-size packed copy goes through memory.
    n, c, y, x = s[output].op.axis
    co, cv = s[output].split(c, factor=bn)
    oyo, oyi = s[output].split(y, factor=oh_bn)
    s[output].reorder(n, co, oyo, cv, oyi, x)
    par = s[output].fuse(n, co, oyo)
    s[output].parallel(par)
    xv = divisor_at_most(ow, target_vector()[0])
    if tail.fused and xv >= 4:
        # NOTE: a fused tail (a sigmoid: ~20 instructions) runs on vectors of a row, read
        # with a stride of bn from the block; one scalar at a time it outweighed the conv
        s[output].vectorize(s[output].split(x, factor=xv)[1])
    s[conv].compute_at(s[output], par)

    acc = s.cache_write(conv, "global")
    _, _, y, x, v = s[conv].op.axis
    xo, xi = s[conv].split(x, factor=ow_bn)
    s[conv].reorder(xo, y, xi, v)
    s[conv].vectorize(v)
    s[acc].compute_at(s[conv], xo)
    _, _, ay, ax, av = s[acc].op.axis
    arco, ary, arx, arci = s[acc].op.reduce_axis
    s[acc].reorder(arco, ary, arx, arci, ay, ax, av)
    _register_tile(cfg, s[acc], ay, ax, arx, av)
    return s, [data, kernel, *tail.extras, output]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
conv2d_nchw = autotvm.template("conv2d_nchw")(_conv2d_nchw)
conv2d_nchw_x86 = autotvm.template("conv2d_nchw.x86")(_conv2d_nchw)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    base = conv_nchw_args(call)
    return [(*base, b) for b in pack_blocks(base[3])] + [base]


def _transform(args: tuple[Any, ...]) -> Any:
    return pack_conv(args[9]) if len(args) > 9 and args[9] else None


strategy.register("nn.conv2d", KEYS, "conv2d_nchw", plevel=10,
                  when=lambda call: is_conv(call, "NCHW"), workloads=_workloads,
                  transform=_transform, fallback=fallback_packed("tile_oc"), epilogue=True)
strategy.catalog(TemplateInfo(
    "conv2d_nchw", "x86", CONV_PARAMS + ("prepacked",), (1, 7, 7, 512, 512, 3, 3, 1, 1),
    "direct conv2d, NCHW data / OIHW kernel (or prepacked [CO/b, CI, KH, KW, b]), packed "
    "output-channel blocks", n_required=9))
