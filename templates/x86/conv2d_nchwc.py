"""x86 ``conv2d_NCHWc`` template: blocked activations in and out (TVM's ``conv2d_NCHWc.x86``).

Layouts (the network's alter-layout pass keeps them between layers):

* data ``[N, CI/ic_bn, H, W, ic_bn]`` (``NCHW{ic_bn}c``);
* kernel ``[CO/oc_bn, CI/ic_bn, KH, KW, ic_bn, oc_bn]`` (``OIHW{ic_bn}i{oc_bn}o``), packed once
  when the network is built;
* output ``[N, CO/oc_bn, OH, OW, oc_bn]`` (``NCHW{oc_bn}c``).

The task is defined on the logical NCHW shapes (as TVM's), so one task's configs cover every
blocking: ``tile_ic`` ``[ci_o, ic_bn]`` and ``tile_oc`` ``[co_o, oc_bn]`` choose the layouts,
``tile_ow`` ``[ow_o, ow_bn]`` the register block, ``unroll_kw`` whether the kernel-width loop is
unrolled. The inner block is a register-blocked micro-kernel: ``ow_bn`` output pixels x
``oc_bn`` channels of accumulators (``ow_bn * oc_bn / lanes`` vector registers, at most the
capability record's accumulator registers: 28 zmm with AVX-512, 14 ymm with AVX2), fed by one
broadcast of an input value and one vector load of ``oc_bn`` weights per FMA chain step. A
block whose weight vectors do not fit beside its accumulators runs as passes over fewer
channel vectors (:func:`register_vectors`; the counts then are a pass's). The space keeps
the blocks that cover the FMA latency (at least half the accumulator registers, where the
row allows) and unrolls ``kw`` only where LLVM keeps the unrolled body in registers
(:func:`spill_free`).
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, output_stage
from templtune.autotvm.space import ConfigSpace, OtherOptionEntity, SplitEntity
from templtune.autotvm.strategy import OpCall, TemplateInfo
from templtune.topi.nn.conv2d import group_merge
from templtune.topi.utils import round_up

from .._strategy import CONV_PARAMS, KEYS, scalar
from ._common import (
    check_positive,
    cores,
    divisor_at_most,
    fma_lanes,
    host_vector,
    inner_sizes,
    lane_filter,
    max_inner,
    pad_tuple,
    register_file,
    stride_pair,
    target_vector,
    vec_regs,
)
from .conv2d_nchwc_bands import BAND_PIXELS, band_rows, pixel_bands
from .conv2d_nchwc_channels import (
    blocks_ok,
    channel_split,
    fallback_block,
    fallback_blocks,
    oc_filter,
    spans_groups,
    vector_lanes,
)
from .conv2d_nchwc_pixels import fused_pixels, pad_blocked, schedule_pad
from .conv2d_nchwc_registers import (
    one_pass,
    pass_width,
    register_vectors,
    row_steps,
    spill_free,
    tail_blocks,
)

TEMPLATE = "conv2d_NCHWc"
#: the template of grouped convolutions (neither plain nor depthwise)
GROUP_TEMPLATE = "group_conv2d_NCHWc.x86"
#: the network op this template implements (TVM's name)
OP = "nn.contrib_conv2d_NCHWc"


def out_size(size: int, k: int, lo: int, hi: int, s: int) -> int:
    return (size + lo + hi - k) // s + 1


#: the smallest L1 data cache of the x86 cores these templates target (Haswell, Zen: 32 KiB)
L1_BYTES = 32 * 1024
#: the smallest L2 of those cores (Haswell): an output-channel block's weights above it do
#: not stay cached from one network run to the next, so a KxK conv streams them from memory
STREAM_BYTES = 256 * 1024


def reduction_chunk(ci: int, ic_bn: int, oc_bn: int, kh: int, kw: int) -> int:
    """Input-channel blocks per chunk of a conv's reduction (0: not chunked).

    Chunked, a band of output pixels accumulates one chunk of input channels at a time (the
    partial sums in a slab, reused by every pixel of the band), as ONNX Runtime's pointwise
    kernels do. A 1x1 conv is chunked where an output-channel block's weights (``ci *
    oc_bn`` floats) overflow L1: unchunked they would stream from L2 once per register block
    of pixels; a chunk's weights take at most half of L1, where one input-channel block
    allows. A KxK conv is chunked where they exceed :data:`STREAM_BYTES` (they come from
    memory on every network run): unchunked, the band's first register block waits on all of
    them and the other blocks re-read them from L2; a chunk's take at most half of that L2,
    so each comes from memory once and serves the band from L2. Chunks of one 16-channel
    block (144 steps of a 3x3 kernel) would reload and store each register block's
    accumulators, and recompute its pixels' pointers, too often.
    """
    block = ic_bn * kh * kw * oc_bn * 4
    limit = L1_BYTES if kh * kw == 1 else STREAM_BYTES
    if ci // ic_bn * block <= limit:
        return 0
    return divisor_at_most(ci // ic_bn, max(1, limit // 2 // block))



def _define(cfg: Any, co: int, ci: int, ow: int, kw: int, pixels: int, groups: int) -> None:
    """The knobs; ``pixels``: the output pixels of an ungrouped conv, whose blocks may span
    rows (:func:`conv2d_nchwc_pixels.fused_pixels`), ``ow`` for a grouped one (blocks within
    a row, the last one partial); :mod:`.conv2d_nchwc_channels` gives the channel blocks."""
    lanes, regs = target_vector()
    nregs, fma = register_file(), fma_lanes()
    if groups == 1:
        channel_split(cfg, "tile_ic", ci, max_inner(64), lanes)
        oc_blocks = channel_split(cfg, "tile_oc", co, lane_filter(co), lanes)
    else:
        keep_oc = oc_filter(groups, co, lanes)
        cfg.define_split("tile_ic", ci, num_outputs=2, filter=max_inner(64))
        cfg.define_split("tile_oc", co, num_outputs=2, filter=keep_oc)
        cfg.multi_filter(lambda e: blocks_ok(groups, co, ci, e["tile_ic"].size[-1],
                                             e["tile_oc"].size[-1], lanes),
                         knobs=("tile_ic", "tile_oc"))
        oc_blocks = inner_sizes(co, keep_oc)

    def vecs_of(oc_bn: int) -> int:  # accumulator registers of a pixel's output channels
        return vec_regs(oc_bn, vector_lanes(groups, co, oc_bn, lanes, ci, fma))

    vec_counts = sorted({vecs_of(v) for v in oc_blocks})
    tails = tail_blocks(ow, pixels, vec_counts, regs, nregs)
    ows = sorted(set(inner_sizes(ow, max_inner(32))) | set(tails))
    if tails:
        cfg.define_split("tile_ow", ow, policy="candidate", num_outputs=2,
                         candidate=[[-1, b] for b in ows])
    else:
        cfg.define_split("tile_ow", ow, num_outputs=2, filter=max_inner(32))
    cfg.define_knob("unroll_kw", [True, False])
    # NOTE: blocks with fewer than half the accumulator registers leave the FMA pipes idle
    # (latency 4 x 2 pipes, plus the loads of a short chain), unless the row is too short for
    # more with that channel block: each channel block (a layout) keeps its fullest rows.
    floor = {v: min(regs // 2, max([b * v for b in ows if b * v <= regs], default=1))
             for v in vec_counts}

    def fits(e: Any) -> bool:
        ow_bn, vecs = e["tile_ow"].size[-1], vecs_of(e["tile_oc"].size[-1])
        if pixels > ow and kw > 1 and ow % ow_bn and e["unroll_kw"].val:
            return False  # over fused pixels the taps are not unrolled: a duplicate
        taps = kw if e["unroll_kw"].val else 1
        return ow_bn * vecs >= floor.get(vecs, 1) and spill_free(ow_bn, vecs, taps, regs, nregs)

    cfg.multi_filter(fits, knobs=("tile_ow", "tile_oc", "unroll_kw"))
    if cfg.is_fallback:
        flanes, fregs = host_vector()
        oc_bn, ic_bn = fallback_block(co, flanes), fallback_block(ci, flanes)
        if groups > 1:
            ic_bn, oc_bn = fallback_blocks(groups, co, ci, flanes, oc_bn, fma)
        vecs = vec_regs(oc_bn, vector_lanes(groups, co, oc_bn, flanes, ci, fma))
        for name, n, b in (("tile_ic", ci, ic_bn), ("tile_oc", co, oc_bn)):
            if n % b:
                cfg[name] = SplitEntity([-1, b])  # a padded block: set, not split
            else:
                cfg.fallback_split(name, [-1, b])
        # NOTE: a row the preferred block does not divide (7 pixels, 6 x 2 ymm) takes the
        # widest one within the accumulator registers rather than a block too short to hide
        # the FMA latency; register_vectors keeps it off the stack
        ow_bn = divisor_at_most(ow, max(1, fregs // vecs))
        if 2 * ow_bn * vecs < fregs:
            ow_bn = divisor_at_most(ow, max(1, regs // vecs))
        # NOTE: a row block that needs passes (7 x 2 ymm) or fills under half the
        # accumulators (7 pixels x one vector: latency-bound chains) loses to a block that
        # fits in one pass over the fused pixels (ungrouped convs), the remainder peeled: the
        # one with the fewest cycles a reduction step (row_steps; on 49 pixels 9 x 5 + 4 beat
        # 8 x 6 + 1). Along a row (grouped KxK) the tail's share is larger and the best block
        # depends on it: left to tuning, unless only latency-bound blocks divide the row
        # (13 pixels: 1 x 2 ymm with AVX2).
        whole = [b for b in tails if one_pass(b, vecs, regs, nregs)]
        passes = pixels > ow and register_vectors(ow_bn, vecs, 1, nregs) < vecs
        if whole and (passes or 2 * ow_bn * vecs < fregs):
            ow_bn = min(whole, key=lambda b: (row_steps(pixels, b, vecs, fregs), -b))
            cfg["tile_ow"] = SplitEntity([-1, ow_bn])  # not a divisor: set, not split
        else:
            cfg.fallback_split("tile_ow", [-1, ow_bn])
        if kw > 1 and oc_bn > co // groups and spans_groups(groups, co, ci, flanes, fma):
            # NOTE: vectors spanning groups shuffle a window per input and pixel; with the kw
            # taps unrolled a pixel's windows serve the taps of its neighbours too (a third
            # of the shuffles): the widest row block whose taps' weights fit beside it
            fit = [b for b in range(ow_bn, 0, -1)
                   if ow % b == 0 and spill_free(b, vecs, kw, fregs, nregs)]
            if fit:
                ow_bn = fit[0]
                cfg.fallback_split("tile_ow", [-1, ow_bn])
        # NOTE: the kw taps are unrolled only where their weights fit beside the accumulators
        # (a row of 7 pixels x 2 zmm does, one of 14 does not)
        cfg["unroll_kw"] = OtherOptionEntity(spill_free(ow_bn, vecs, kw, fregs, nregs))


def _conv2d_nchwc(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
                  padding: Any, *, epilogue: Epilogue | None = None) -> tuple[Any, list[Any]]:
    """``(schedule, [data, kernel, output])`` in the blocked layouts the config chooses.

    Arguments are the logical NCHW / OIHW sizes (as ``conv2d_nchw``'s): batch, input
    height/width, output and input channels, kernel height/width, stride, padding.
    ``epilogue`` (a fused element-wise tail on the blocked output: bias, residual add, relu)
    is computed on each register block as it is stored; the arguments are then ``[data,
    kernel, *epilogue inputs, fused output]``.
    """
    return _build(N, H, W, CO, CI, KH, KW, stride, padding, 1, epilogue)


def _group_conv2d_nchwc(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int,
                        stride: Any, padding: Any, groups: int, *,
                        epilogue: Epilogue | None = None) -> tuple[Any, list[Any]]:
    """:func:`_conv2d_nchwc` of a convolution in ``groups`` groups: the kernel is
    ``[CO/oc_bn, CI'/ic_bn, KH, KW, ic_bn, oc_bn]``, ``CI'`` the input channels of a group
    (of a merged group where ``oc_bn`` holds several: ``graph.ops.nchwc.pack_group_kernel``)."""
    if groups < 2 or CI % groups or CO % groups:
        raise ValueError(f"group_{TEMPLATE}: {CI} input and {CO} output channels do not "
                         f"split into {groups} groups")
    return _build(N, H, W, CO, CI, KH, KW, stride, padding, groups, epilogue)


def _build(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
           padding: Any, groups: int, epilogue: Epilogue | None) -> tuple[Any, list[Any]]:
    check_positive(N=N, H=H, W=W, CO=CO, CI=CI, KH=KH, KW=KW)
    sh, sw = stride_pair(stride)
    pt, pl, pb, pr = pad_tuple(padding)
    oh, ow = out_size(H, KH, pt, pb, sh), out_size(W, KW, pl, pr, sw)
    if oh < 1 or ow < 1:
        raise ValueError(f"{TEMPLATE}: empty output ({oh}x{ow}) for a {H}x{W} input")
    cfg = autotvm.get_config()
    # NOTE: any conv writes its pixels contiguously; only its reads skip (strides, taps):
    # ungrouped, its register blocks may span rows (conv2d_nchwc_pixels)
    fusable = groups == 1
    _define(cfg, CO, CI, ow, KW, oh * ow if fusable else ow, groups)
    cfg.add_flop(2.0 * N * CO * oh * ow * (CI // groups) * KH * KW)
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    ow_bn = cfg["tile_ow"].size[-1]
    # the blocks hold zeros past channels they do not divide (padded_blocks)
    cib, cob = round_up(CI, ic_bn) // ic_bn, round_up(CO, oc_bn) // oc_bn
    # the input channels each output block reads: a (merged) group's, all of them ungrouped
    merged = 1 if groups == 1 else group_merge(groups, CO, oc_bn)
    reads = cib * ic_bn if groups == 1 else CI // groups * merged
    # NOTE: a block of m > 1 groups has the split kernel (graph.ops.nchwc.pack_group_kernel):
    # each output lane weighs only its group's inputs, vectors within one group
    taps_in = CI // groups if merged > 1 else ic_bn
    # NOTE: a space being collected runs its first, unfiltered point; a record's config must
    # be a blocking the kernel packing takes (an older template's merged blocks are not)
    if merged > 1 and ic_bn != reads and not isinstance(cfg, ConfigSpace):
        raise ValueError(f"group_{TEMPLATE}: a block of {merged} groups reads one input "
                         f"block of their {reads} channels, not {ic_bn}")

    data = te.placeholder((N, cib, H, W, ic_bn), name="data")
    kernel = te.placeholder((cob, reads // ic_bn, KH, KW, taps_in, oc_bn), name="kernel")
    pads = (pt, pl, pb, pr)
    if fusable and ow % ow_bn:
        chunk = reduction_chunk(reads, ic_bn, oc_bn, KH, KW)
        band = ow_bn * max(1, BAND_PIXELS // ow_bn) if chunk else 0
        # NOTE: a chunked conv's bands stay serial (a band of its own may end in a tail)
        split = 1 if chunk else pixel_bands(oh * ow, ow_bn, N * cob, cores())
        return fused_pixels(data, kernel, (sh, sw), pads, ow_bn, pass_width(ow_bn, oc_bn, 1),
                            chunk, band, epilogue, split)
    dpad = pad_blocked(data, pads)
    rco = te.reduce_axis((0, reads // ic_bn), name="rco")
    rci = te.reduce_axis((0, taps_in), name="rci")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    per_group = cob * reads // CI  # output blocks per (merged) group

    og = oc_bn // merged  # output lanes per group in a merged block

    def block(o: Any) -> Any:
        return rco if groups == 1 else o // per_group * (reads // ic_bn) + rco

    def lane(v: Any) -> Any:
        return rci if merged == 1 else v // og * taps_in + rci

    conv = te.compute(
        (N, cob, oh, ow, oc_bn),
        lambda n, o, y, x, v: te.sum(dpad[n, block(o), y * sh + ry, x * sw + rx, lane(v)]
                                     * kernel[o, rco, ry, rx, rci, v],
                                     axis=[rco, ry, rx, rci]),
        name="conv2d_NCHWc", tag="conv2d_NCHWc")
    tail = attach(conv, epilogue)
    s = te.create_schedule(tail.output.op)
    schedule_pad(s, dpad, data)

    # NOTE: the output block (ow_bn pixels x oc_bn channels) accumulates in registers over the
    # whole reduction, then is stored once (through the epilogue); output rows run in parallel.
    out, acc = output_stage(s, tail)
    chunk = reduction_chunk(reads, ic_bn, oc_bn, KH, KW)
    unroll_kw = bool(cfg["unroll_kw"].val)
    # a vector of a merged block lies within one group (its lanes broadcast one input), or
    # spans narrow groups (its lanes read a window of their inputs, shuffled)
    vlanes = vector_lanes(groups, CO, oc_bn, target_vector()[0], CI, fma_lanes())
    width = pass_width(ow_bn, oc_bn, KW if unroll_kw else 1, vlanes)
    vector = vlanes if merged > 1 and vlanes < width else None
    if chunk:
        band = band_rows(oh, ow, N * cob, cores())
        _chunked(s, out, acc, chunk, band, ow_bn, width, unroll_kw, vector)
        return s, [data, kernel, *tail.extras, out]
    n, o, y, x, v = s[out].op.axis
    xo, xi = s[out].split(x, factor=ow_bn)
    vo, vi = s[out].split(v, factor=width)
    s[out].reorder(n, o, y, xo, vo, xi, vi)
    s[out].parallel(s[out].fuse(n, o, y))
    s[out].vectorize(vi)
    s[acc].compute_at(s[out], vo)
    _, _, _, ax, av = s[acc].op.axis
    arco, _, _, _ = s[acc].op.reduce_axis
    _micro_kernel(s, acc, [arco], ax, av, unroll_kw, vector)
    return s, [data, kernel, *tail.extras, out]


def _micro_kernel(s: Any, acc: Any, outer: list[Any], pixels: Any, lanes: Any,
                  unroll_kw: bool, vector: int | None = None) -> None:
    """Order ``acc``'s register block: ``outer`` loops, then the kernel taps and the input
    channels of a block, then the ``pixels`` (unrolled) x ``lanes`` (vectorized; with
    ``vector``, that many lanes at a time, the vectors unrolled) accumulators.

    Innermost: one broadcast of data[.., rci] times one weight vector per pixel; with
    ``unroll_kw`` the kw taps are unrolled around the pixel chain (TVM's order)."""
    _, ary, arx, arci = s[acc].op.reduce_axis
    taps = [ary, arci, arx] if unroll_kw else [ary, arx, arci]
    vecs = []
    if vector is not None:
        vo, lanes = s[acc].split(lanes, factor=vector)
        vecs.append(vo)
    s[acc].reorder(*outer, *taps, pixels, *vecs, lanes)
    if unroll_kw:
        s[acc].unroll(arx)
    s[acc].unroll(pixels)
    for vo in vecs:
        s[acc].unroll(vo)
    s[acc].vectorize(lanes)


def _chunked(s: Any, out: Any, acc: Any, chunk: int, band: int, ow_bn: int, width: int,
             unroll_kw: bool, vector: int | None) -> None:
    """Schedule a conv whose reduction is chunked (:func:`reduction_chunk`): bands of
    ``band`` output rows run in parallel; within one, per chunk of ``chunk`` input-channel
    blocks, each register block (``ow_bn`` pixels x ``oc_bn`` channels) is loaded from the
    band's slab of partial sums, accumulated in registers over the chunk (the kernel taps in
    the unchunked order) and stored back; then the band is stored (through the epilogue)."""
    n, o, y, x, v = s[out].op.axis
    yo, yi = s[out].split(y, factor=band)
    xo, xi = s[out].split(x, factor=ow_bn)
    s[out].reorder(n, o, yo, yi, xo, xi, v)
    bands = s[out].fuse(n, o, yo)
    s[out].parallel(bands)
    s[out].vectorize(v)
    s[acc].compute_at(s[out], bands)
    _, _, ay, ax, av = s[acc].op.axis
    arco, _, _, _ = s[acc].op.reduce_axis
    axo, axi = s[acc].split(ax, factor=ow_bn)
    avo, avi = s[acc].split(av, factor=width)
    rco_o, rco_i = s[acc].split(arco, factor=chunk)
    _micro_kernel(s, acc, [rco_o, ay, axo, avo, rco_i], axi, avi, unroll_kw, vector)


conv2d_NCHWc = autotvm.template(TEMPLATE)(_conv2d_nchwc)
conv2d_NCHWc_x86 = autotvm.template(f"{TEMPLATE}.x86")(_conv2d_nchwc)
group_conv2d_NCHWc = autotvm.template(GROUP_TEMPLATE)(_group_conv2d_nchwc)


# ---- strategy and catalogue ---------------------------------------------------------------------
def logical_args(call: OpCall) -> tuple[Any, ...]:
    """``(N, H, W, CO, CI, KH, KW, stride, padding)`` of a blocked call (5-D data, 6-D kernel)
    or of a plain NCHW / OIHW one."""
    d, k = call.inputs[0], call.inputs[1]
    if len(d) == 5:  # the blocks may hold zeros past the channels: the call says
        n, ci, h, w = d[0], call.attr("in_channels") or d[1] * d[4], d[2], d[3]
        co, kh, kw = call.attr("channels") or k[0] * k[5], k[2], k[3]
    else:
        n, ci, h, w = d
        co, _, kh, kw = k
    return (n, h, w, co, ci, kh, kw, scalar(call.attr("strides")),
            scalar(call.attr("padding")))


def _when(call: OpCall) -> bool:
    return call.dtype == "float32" and call.attr("groups", 1) == 1


def _when_grouped(call: OpCall) -> bool:
    return call.dtype == "float32" and call.attr("groups", 1) != 1


strategy.register(OP, KEYS, TEMPLATE, plevel=10, when=_when,
                  workloads=lambda call: [logical_args(call)], epilogue=True)
strategy.register(OP, KEYS, GROUP_TEMPLATE, plevel=10, when=_when_grouped,
                  workloads=lambda call: [(*logical_args(call), call.attr("groups"))],
                  epilogue=True)
strategy.catalog(TemplateInfo(
    TEMPLATE, "x86", CONV_PARAMS, (1, 7, 7, 512, 512, 3, 3, 1, 1),
    "direct conv2d on blocked layouts: NCHW[ic_bn]c data, OIHW[ic_bn]i[oc_bn]o kernel, "
    "NCHW[oc_bn]c output (the blocks are knobs)"))
strategy.catalog(TemplateInfo(
    GROUP_TEMPLATE, "x86", CONV_PARAMS + ("groups",), (1, 28, 28, 256, 256, 3, 3, 1, 1, 32),
    "grouped conv2d on blocked layouts (ResNeXt, RegNet): conv2d_NCHWc's blocks, each output "
    "block reading its group's input blocks; groups narrower than a block merge"))
