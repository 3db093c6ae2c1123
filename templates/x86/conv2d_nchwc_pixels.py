"""``conv2d_NCHWc`` over fused pixels: register blocks that span rows.

The blocked output ``[.., OH, OW, c]`` is ``[.., OH * OW, c]`` in memory, and each output
pixel reads its own window of the (padded) input at ``(y * stride, x * stride)``, wherever
that is, so a register block need not divide a row: each pixel of a block keeps its own input
pointer (computed once per block, outside the reduction), and the reduction's offsets are
common to all of them. 6 pixels x 2 ymm (12 accumulators, one pass) run over the 49 pixels
of a 7x7 map as 8 full blocks and a peeled 1-pixel tail
(:func:`templtune.lower.partition.partition_loops`), where a 7-pixel row block must run as
two 7 x 1 ymm passes with one broadcast per FMA and a row's 4 + 3 blocks leave the 3-pixel
one short of chains. A KxK conv's taps run in the reduction (``ry, rx, rci``), not unrolled:
neighbouring pixels of a block need not share a row, so they share no broadcast.

The accumulating stage is computed over ``[N, CO/oc_bn, OH*OW, oc_bn]``, the output stage too
(the kernel's output argument has that shape; the network runs it on its ``NCHW{oc_bn}c``
array viewed so, the same memory). The epilogue is applied on the 5-D view of the conv and
inlined into the output stage.
"""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.autotvm.epilogue import Epilogue, attach, inline_tail


def pad_blocked(data: te.Tensor, pads: tuple[int, int, int, int]) -> te.Tensor:
    """``data`` (``[N, C/c, H, W, c]``) zero-padded by ``pads`` (top, left, bottom, right) as
    a stage of its own (:func:`schedule_pad`), or ``data`` itself where nothing pads it."""
    pt, pl, pb, pr = pads
    if not (pt or pl or pb or pr):
        return data
    n_, c_, h, w, b = (int(d) for d in data.shape)
    return te.compute(
        (n_, c_, h + pt + pb, w + pl + pr, b),
        lambda n, c, y, x, i: te.if_then_else(
            te.all(y >= pt, y < h + pt, x >= pl, x < w + pl),
            data[n, c, y - pt, x - pl, i], te.const(0.0, data.dtype)),
        name="data_pad")


def schedule_pad(s: Any, padded: te.Tensor, data: te.Tensor) -> None:
    """Rows of the pad stage in parallel, its channel block vectorized (nothing where
    ``padded`` is ``data``)."""
    if padded is data:
        return
    pn, pc, py, _, pi = s[padded].op.axis
    s[padded].parallel(s[padded].fuse(pn, pc, py))
    s[padded].vectorize(pi)


def fused_pixels(data: te.Tensor, kernel: te.Tensor, stride: tuple[int, int],
                 pads: tuple[int, int, int, int], ow_bn: int, width: int, chunk: int,
                 band: int, epilogue: Epilogue | None,
                 split: int = 1) -> tuple[Any, list[Any]]:
    """``(schedule, [data, kernel, *epilogue inputs, output])`` of a conv whose register
    blocks are ``ow_bn`` consecutive output pixels x ``width`` lanes.

    ``data`` is ``[N, CI/ic_bn, H, W, ic_bn]``, ``kernel`` ``[CO/oc_bn, CI/ic_bn, KH, KW,
    ic_bn, oc_bn]``, ``stride`` ``(sh, sw)``, ``pads`` (top, left, bottom, right); ``chunk``
    input-channel blocks per reduction chunk (0: unchunked; see
    ``conv2d_nchwc.reduction_chunk``), each accumulated over ``band`` pixels (a multiple of
    ``ow_bn``) while its weights are cached; ``split`` equal bands of the pixels (unchunked
    only) run in parallel beside the output-channel blocks, each with its own partial last
    register block.
    """
    n_, cib, ih, iw, ic_bn = (int(d) for d in data.shape)
    cob, kh, kw, oc_bn = (int(kernel.shape[i]) for i in (0, 2, 3, 5))
    sh, sw = stride
    pt, pl, pb, pr = pads
    h, w = (ih + pt + pb - kh) // sh + 1, (iw + pl + pr - kw) // sw + 1
    pixels = h * w
    src = pad_blocked(data, pads)
    rco = te.reduce_axis((0, cib), name="rco")
    rci = te.reduce_axis((0, ic_bn), name="rci")
    # NOTE: a 1x1 kernel's taps are constants, not unit loops, so the reduction of a
    # pointwise conv stays (rco, rci)
    ry = te.reduce_axis((0, kh), name="ry") if kh > 1 else None
    rx = te.reduce_axis((0, kw), name="rx") if kw > 1 else None
    taps = [t for t in (ry, rx) if t is not None]
    ty = 0 if ry is None else ry
    tx = 0 if rx is None else rx
    acc = te.compute(
        (n_, cob, pixels, oc_bn),
        lambda n, o, p, v: te.sum(src[n, rco, p // w * sh + ty, p % w * sw + tx, rci]
                                  * kernel[o, rco, ty, tx, rci, v], axis=[rco, *taps, rci]),
        name="conv2d_NCHWc_pixels")
    conv = te.compute((n_, cob, h, w, oc_bn), lambda n, o, y, x, v: acc[n, o, y * w + x, v],
                      name="conv2d_NCHWc", tag="conv2d_NCHWc")
    tail = attach(conv, epilogue)
    final = tail.output
    out = te.compute((n_, cob, pixels, oc_bn),
                     lambda n, o, p, v: final[n, o, p // w, p % w, v], name="conv2d_NCHWc_out")
    s = te.create_schedule(out.op)
    schedule_pad(s, src, data)
    inline_tail(s, tail)
    if tail.fused:
        s[final].compute_inline()
    s[conv].compute_inline()

    n, o, p, v = s[out].op.axis
    # NOTE: the block loops stay serial below the parallel (n, o[, band]) loop, so their
    # partial last iterations can be peeled; a fused parallel loop would keep the guards in
    # every block. Equal bands divide the pixels: no guard on the band loop.
    par = [n, o]
    if split > 1 and not chunk:
        pb_, p = s[out].split(p, nparts=split)
        par.append(pb_)
    if chunk:
        po, pi = s[out].split(p, factor=band)
        pio, pii = s[out].split(pi, factor=ow_bn)
        s[out].reorder(n, o, po, pio, pii, v)
        vec, at = v, po
    else:
        po, pi = s[out].split(p, factor=ow_bn)
        vo, vec = s[out].split(v, factor=width)
        s[out].reorder(*par, po, vo, pi, vec)
        at = vo
    s[out].parallel(s[out].fuse(*par))
    s[out].vectorize(vec)
    s[acc].compute_at(s[out], at)
    _, _, ap, av = s[acc].op.axis
    arco, *ataps, arci = s[acc].op.reduce_axis
    if chunk:
        apo, api = s[acc].split(ap, factor=ow_bn)
        avo, avi = s[acc].split(av, factor=width)
        rco_o, rco_i = s[acc].split(arco, factor=chunk)
        s[acc].reorder(rco_o, apo, avo, rco_i, *ataps, arci, api, avi)
    else:
        api, avi = ap, av
        s[acc].reorder(arco, *ataps, arci, api, avi)
    s[acc].unroll(api)
    s[acc].vectorize(avi)
    return s, [data, kernel, *tail.extras, out]
