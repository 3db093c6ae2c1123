"""Pointwise ``conv2d_NCHWc`` over fused pixels: register blocks that span rows.

A 1x1 conv without padding writes its pixels contiguously in the blocked layout (``[.., OH,
OW, c]`` is ``[.., OH * OW, c]``) and reads one broadcast input value per pixel and channel
(at ``(y * stride, x * stride)``, wherever that is), so its register block need not divide a
row: 6 pixels x 2 ymm (12 accumulators, one pass) run over the 49 pixels of a 7x7 map as 8
full blocks and a peeled 1-pixel tail (:func:`templtune.lower.partition.partition_loops`),
where a 7-pixel row block must run as two 7 x 1 ymm passes with one broadcast per FMA.

The accumulating stage is computed over ``[N, CO/oc_bn, OH*OW, oc_bn]``, the output stage too
(the kernel's output argument has that shape; the network runs it on its ``NCHW{oc_bn}c``
array viewed so, the same memory). The epilogue is applied on the 5-D view of the conv and
inlined into the output stage.
"""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.autotvm.epilogue import Epilogue, attach, inline_tail


def pointwise_pixels(data: te.Tensor, kernel: te.Tensor, stride: tuple[int, int], ow_bn: int,
                     width: int, chunk: int, band: int,
                     epilogue: Epilogue | None, split: int = 1) -> tuple[Any, list[Any]]:
    """``(schedule, [data, kernel, *epilogue inputs, output])`` of a pointwise conv whose
    register blocks are ``ow_bn`` consecutive pixels x ``width`` lanes.

    ``data`` is ``[N, CI/ic_bn, H, W, ic_bn]``, ``kernel`` ``[CO/oc_bn, CI/ic_bn, 1, 1, ic_bn,
    oc_bn]``, ``stride`` ``(sh, sw)``; ``chunk`` input-channel blocks per reduction chunk (0:
    unchunked; see ``conv2d_nchwc.reduction_chunk``), each accumulated over ``band`` pixels (a
    multiple of ``ow_bn``) while its weights are in L1; ``split`` equal bands of the pixels
    (unchunked only) run in parallel beside the output-channel blocks, each with its own
    partial last register block.
    """
    n_, cib, ih, iw, ic_bn = (int(d) for d in data.shape)
    cob, oc_bn = int(kernel.shape[0]), int(kernel.shape[5])
    sh, sw = stride
    h, w = (ih - 1) // sh + 1, (iw - 1) // sw + 1
    pixels = h * w
    rco = te.reduce_axis((0, cib), name="rco")
    rci = te.reduce_axis((0, ic_bn), name="rci")
    acc = te.compute(
        (n_, cob, pixels, oc_bn),
        lambda n, o, p, v: te.sum(data[n, rco, p // w * sh, p % w * sw, rci]
                                  * kernel[o, rco, 0, 0, rci, v], axis=[rco, rci]),
        name="conv2d_NCHWc_pixels")
    conv = te.compute((n_, cob, h, w, oc_bn), lambda n, o, y, x, v: acc[n, o, y * w + x, v],
                      name="conv2d_NCHWc", tag="conv2d_NCHWc")
    tail = attach(conv, epilogue)
    final = tail.output
    out = te.compute((n_, cob, pixels, oc_bn),
                     lambda n, o, p, v: final[n, o, p // w, p % w, v], name="conv2d_NCHWc_out")
    s = te.create_schedule(out.op)
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
        pb, p = s[out].split(p, nparts=split)
        par.append(pb)
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
    arco, arci = s[acc].op.reduce_axis
    if chunk:
        apo, api = s[acc].split(ap, factor=ow_bn)
        avo, avi = s[acc].split(av, factor=width)
        rco_o, rco_i = s[acc].split(arco, factor=chunk)
        s[acc].reorder(rco_o, apo, avo, rco_i, arci, api, avi)
    else:
        api, avi = ap, av
        s[acc].reorder(arco, arci, api, avi)
    s[acc].unroll(api)
    s[acc].vectorize(avi)
    return s, [data, kernel, *tail.extras, out]
