"""x86 Winograd convolution on blocked layouts, F(m x m, 3 x 3): ``conv2d_NCHWc_winograd``.

The Winograd counterpart of ``conv2d_NCHWc``, in the layouts the network's alter-layout pass
keeps between layers, so a layer can trade its direct kernel for this one without a layout
transform around it:

* data ``[N, CI/ic_bn, H, W, ic_bn]`` (``NCHW{ic_bn}c``);
* kernel transformed once when the network is built, ``U = G g G^T`` blocked by output
  channels: ``[alpha, alpha, CO/oc_bn, CI, oc_bn]``;
* output ``[N, CO/oc_bn, OH, OW, oc_bn]`` (``NCHW{oc_bn}c``), with a fused epilogue.

The blocks and ``m`` are task arguments (the weight's shape depends on them); stride 1 only.
Stages: ``data_pad``; ``data_row``/``data_pack`` (``B^T d B``, rows then columns, one tile's
channel block at a time, vectorized over the block's channels, so every load is a contiguous
vector); ``bgemm`` (``alpha^2`` GEMMs over the input channels, register blocks of ``tile_p``
tiles x ``tile_kb`` output blocks); ``inverse_row`` and the output stage (``A^T M A``, rows then
columns, one output tile at a time, the epilogue applied as it is stored).

Knobs: ``tile_p`` (tiles per register block, a divisor of the tile count), ``tile_kb`` (output
channel blocks per register block), ``unroll_c`` (input channels unrolled per step),
``fuse_rows`` (each stage over the whole layer in turn, or one row of tiles through every stage
at a time, the rows in parallel). The space keeps the register blocks that fit the accumulator
registers of the target's capability record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, inline_tail
from templtune.autotvm.strategy import OpCall, TemplateInfo
from templtune.topi.nn.winograd import winograd_transform_matrices

from .._strategy import CONV_PARAMS, KEYS, winograd_weights
from ._common import check_positive, host_vector, pad_tuple, stride_pair, target_vector, vec_regs
from .conv2d_nchwc import OP, logical_args, out_size
from .conv2d_winograd import _other, _tsum

TEMPLATE = "conv2d_NCHWc_winograd"
#: tile sizes ``m`` the template takes (alpha = m + 2)
TILE_SIZES = (2, 4)


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _define(cfg: Any, P: int, nw: int, ic_bn: int, n_kb: int, oc_bn: int) -> None:
    lanes, regs = target_vector()
    vecs = vec_regs(oc_bn, lanes)
    cfg.define_knob("tile_p", _divisors(P, max(1, regs // vecs)))
    cfg.define_knob("tile_kb", _divisors(n_kb, 4))
    cfg.define_knob("unroll_c", [c for c in (1, 2, 4, 8) if ic_bn % c == 0])
    cfg.define_knob("fuse_rows", [False, True])
    # NOTE: blocks below half the accumulator registers leave the FMA pipes waiting on
    # latency, unless no larger block divides the tile count.
    best = max(p * k * vecs for p in _divisors(P, regs) for k in _divisors(n_kb, 4)
               if p * k * vecs <= regs)

    def fits(e: Any) -> bool:
        acc = e["tile_p"].val * e["tile_kb"].val * vecs
        # NOTE: a row of tiles at a time: its register blocks must tile the row
        return (acc <= regs and 2 * acc >= min(best, regs)
                and not (e["fuse_rows"].val and nw % e["tile_p"].val))

    cfg.multi_filter(fits, knobs=("tile_p", "tile_kb", "fuse_rows"))
    if cfg.is_fallback:
        flanes, fregs = host_vector()
        fvecs = vec_regs(oc_bn, flanes)
        blocks = sorted(((p * k * fvecs, p, k) for p in _divisors(P, fregs)
                         for k in _divisors(n_kb, 4) if p * k * fvecs <= fregs), reverse=True)
        _, p, k = blocks[0]
        cfg["tile_p"] = _other(p)
        cfg["tile_kb"] = _other(k)
        cfg["unroll_c"] = _other(4 if ic_bn % 4 == 0 else 1)
        cfg["fuse_rows"] = _other(False)


def _conv2d_nchwc_winograd(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int,
                           stride: Any, padding: Any, ic_bn: int, oc_bn: int, m: int, *,
                           epilogue: Epilogue | None = None) -> tuple[Any, list[Any]]:
    """``(schedule, [data, kernel, output])`` (``[data, kernel, *epilogue inputs, fused
    output]`` with ``epilogue``) for the current config.

    Arguments: the logical NCHW / OIHW sizes (as ``conv2d_NCHWc``'s; a 3x3 kernel, stride 1),
    the channel blocks of the data and the output, and the tile size ``m`` the kernel was
    transformed for (:func:`transform_weight`).
    """
    check_positive(N=N, H=H, W=W, CO=CO, CI=CI, ic_bn=ic_bn, oc_bn=oc_bn)
    if stride_pair(stride) != (1, 1) or (KH, KW) != (3, 3):
        raise ValueError(f"{TEMPLATE} needs a 3x3 kernel with stride 1, got {KH}x{KW} "
                         f"stride {stride}")
    if m not in TILE_SIZES:
        raise ValueError(f"{TEMPLATE}: tile size m must be one of {TILE_SIZES}, got {m}")
    if CI % ic_bn or CO % oc_bn:
        raise ValueError(f"{TEMPLATE}: blocks {ic_bn}/{oc_bn} do not divide CI={CI}/CO={CO}")
    pt, pl, pb, pr = pad_tuple(padding)
    oh, ow = out_size(H, 3, pt, pb, 1), out_size(W, 3, pl, pr, 1)
    if oh < 1 or ow < 1:
        raise ValueError(f"{TEMPLATE}: empty output ({oh}x{ow}) for a {H}x{W} input")
    alpha = m + 2
    nh, nw = -(-oh // m), -(-ow // m)
    P = N * nh * nw
    n_cb, n_kb = CI // ic_bn, CO // oc_bn
    cfg = autotvm.get_config()
    _define(cfg, P, nw, ic_bn, n_kb, oc_bn)
    cfg.add_flop(2.0 * N * CO * oh * ow * CI * 9)
    tp, tkb, uc = cfg["tile_p"].val, cfg["tile_kb"].val, cfg["unroll_c"].val
    rows = bool(cfg["fuse_rows"].val)

    a_np, b_np, _ = winograd_transform_matrices(m, 3, "float32")
    data = te.placeholder((N, n_cb, H, W, ic_bn), name="data")
    kernel = te.placeholder((alpha, alpha, n_kb, CI, oc_bn), name="kernel")
    # NOTE: padded up to whole tiles, so the last (partial) tile reads inside the buffer.
    ph, pw = (nh - 1) * m + alpha, (nw - 1) * m + alpha
    dpad = te.compute(
        (N, n_cb, ph, pw, ic_bn),
        lambda n, c, y, x, i: te.if_then_else(
            te.all(y >= pt, y < H + pt, x >= pl, x < W + pl),
            data[n, c, y - pt, x - pl, i], te.const(0.0, "float32")),
        name="data_pad")

    def row_pass(p: Any, c: Any, e: Any, x: Any, i: Any) -> Any:
        # tile p: image p // (nh nw), top-left corner (y0, x0) in the padded input
        n, y0, x0 = p // (nh * nw), (p // nw) % nh * m, p % nw * m
        return _tsum(b_np, e, lambda r: dpad[n, c, y0 + r, x0 + x, i])

    data_row = te.compute((P, n_cb, alpha, alpha, ic_bn), row_pass, name="data_row")
    data_pack = te.compute(
        (alpha, alpha, P, n_cb, ic_bn),
        lambda e, u, p, c, i: _tsum(b_np, u, lambda r: data_row[p, c, e, r, i]),
        name="data_pack")
    rcb = te.reduce_axis((0, n_cb), name="rcb")
    rci = te.reduce_axis((0, ic_bn), name="rci")
    bgemm = te.compute(
        (alpha, alpha, P, n_kb, oc_bn),
        lambda e, u, p, k, v: te.sum(data_pack[e, u, p, rcb, rci]
                                     * kernel[e, u, k, rcb * ic_bn + rci, v], axis=[rcb, rci]),
        name="bgemm")
    inv_row = te.compute(
        (P, n_kb, m, alpha, oc_bn),
        lambda p, k, vh, ib, v: _tsum(a_np, vh, lambda ia: bgemm[ia, ib, p, k, v]),
        name="inverse_row")
    output = te.compute(
        (N, n_kb, oh, ow, oc_bn),
        lambda n, k, y, x, v: _tsum(a_np, x % m, lambda ib: inv_row[
            n * (nh * nw) + y // m * nw + x // m, k, y % m, ib, v]),
        name="conv2d_NCHWc_winograd", tag="conv2d_NCHWc_winograd")
    tail = attach(output, epilogue)
    s = te.create_schedule(tail.output.op)
    inline_tail(s, tail, anchor_too=True)
    out = tail.output

    pn, pc, py, _, pi = s[dpad].op.axis
    s[dpad].parallel(s[dpad].fuse(pn, pc, py))
    s[dpad].vectorize(pi)

    # NOTE: one tile's channel block at a time: its alpha^2 row-pass vectors stay in
    # registers / L1 and every load and store is a whole vector of the block's channels.
    e, u, p, c, i = s[data_pack].op.axis
    s[data_pack].reorder(p, c, e, u, i)
    s[data_pack].unroll(e)
    s[data_pack].unroll(u)
    s[data_pack].vectorize(i)
    if rows:
        s[data_row].compute_at(s[data_pack], c)
    else:
        s[data_pack].parallel(s[data_pack].fuse(p, c))
        s[data_row].compute_at(s[data_pack], s[data_pack].leaf_iter_vars[0])
    _, _, re_, rx, ri = s[data_row].op.axis
    s[data_row].unroll(re_)
    s[data_row].unroll(rx)
    s[data_row].vectorize(ri)

    # NOTE: register block of tile_p tiles x tile_kb channel blocks accumulated over all input
    # channels: one broadcast of a transformed input value per tile, one weight vector load
    # per channel block vector, reused by every tile of the block.
    acc = s.cache_write(bgemm, "global")
    e, u, p, k, v = s[bgemm].op.axis
    po, pi = s[bgemm].split(p, factor=tp)
    ko, ki = s[bgemm].split(k, factor=tkb)
    s[bgemm].reorder(e, u, ko, po, pi, ki, v)
    if not rows:
        s[bgemm].parallel(s[bgemm].fuse(e, u, ko))
    s[bgemm].vectorize(v)
    s[acc].compute_at(s[bgemm], po)
    _, _, ap, ak, av = s[acc].op.axis
    arcb, arci = s[acc].op.reduce_axis
    aco, aci = s[acc].split(arci, factor=uc)
    s[acc].reorder(arcb, aco, aci, ap, ak, av)
    s[acc].unroll(aci)
    s[acc].unroll(ap)
    s[acc].unroll(ak)
    s[acc].vectorize(av)

    # NOTE: one output tile at a time: its row pass stays in registers, and the columns are
    # unrolled so that x % m (the column of A) is a constant.
    n, k, y, x, v = s[out].op.axis
    yo, yi = s[out].split(y, factor=m)
    xo, xi = s[out].split(x, factor=m)
    if rows:
        # NOTE: one row of tiles through every stage at a time: its transformed input and
        # GEMM result (alpha^2 x a row of tiles x the channels) stay in L2 instead of
        # round-tripping the whole layer's through memory
        s[out].reorder(n, yo, k, xo, yi, xi, v)
        row = s[out].fuse(n, yo)
        s[out].parallel(row)
        s[bgemm].compute_at(s[out], row)
        s[data_pack].compute_at(s[out], row)
    else:
        s[out].reorder(n, k, yo, xo, yi, xi, v)
        s[out].parallel(s[out].fuse(n, k, yo))
    s[out].unroll(yi)
    s[out].unroll(xi)
    s[out].vectorize(v)
    s[inv_row].compute_at(s[out], xo)
    _, _, rvh, rib, rv = s[inv_row].op.axis
    s[inv_row].unroll(rvh)
    s[inv_row].unroll(rib)
    s[inv_row].vectorize(rv)
    return s, [data, kernel, *tail.extras, out]


conv2d_NCHWc_winograd = autotvm.template(TEMPLATE)(_conv2d_nchwc_winograd)
conv2d_NCHWc_winograd_x86 = autotvm.template(f"{TEMPLATE}.x86")(_conv2d_nchwc_winograd)


def transform_weight(m: int, ic_bn: int, oc_bn: int) -> Any:
    """The build-time weight transform: an ``OIHW{ic_bn}i{oc_bn}o`` kernel (as the alter-layout
    pass packs it) -> ``U`` as ``[alpha, alpha, CO/oc_bn, CI, oc_bn]``."""
    to_u = winograd_weights(m, oc_bn)

    def f(k: np.ndarray) -> np.ndarray:
        ko, ci_o, kh, kw, ib, ob = k.shape
        if (ib, ob) != (ic_bn, oc_bn):
            raise ValueError(f"{TEMPLATE}: kernel blocked {ib}i{ob}o, expected "
                             f"{ic_bn}i{oc_bn}o")
        oihw = k.transpose(0, 5, 1, 4, 2, 3).reshape(ko * ob, ci_o * ib, kh, kw)
        return to_u(oihw)
    return f


# ---- strategy and catalogue ---------------------------------------------------------------------
#: output pixels from which an untuned layer runs Winograd rather than the direct fallback: the
#: transformed weights are (m + 2)^2 / 9 times the kernel's, streamed once per inference, which
#: smaller images do not repay
UNTUNED_MIN_PIXELS = 100


def _when(call: OpCall) -> bool:
    d, k = call.inputs[0], call.inputs[1]
    if not (call.dtype == "float32" and call.attr("groups", 1) == 1 and len(d) == 5
            and len(k) == 6 and k[2:4] == (3, 3) and call.attr("strides") == (1, 1)):
        return False
    _, _, _, co, ci, *_ = logical_args(call)
    return ci % d[4] == 0 and co % k[5] == 0  # no zero-padded channel blocks


def _untuned_plevel(call: OpCall) -> int:
    # NOTE: above the direct template's plevel where Winograd's fallback beats the direct
    # one's (benchmarks/studies/winograd_fallback.py measures it), below it elsewhere
    _, h, w, *_ = logical_args(call)
    pt, pl, pb, pr = pad_tuple(call.attr("padding"))
    pixels = out_size(h, 3, pt, pb, 1) * out_size(w, 3, pl, pr, 1)
    return 15 if pixels >= UNTUNED_MIN_PIXELS else 5


def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    ic_bn, oc_bn = call.inputs[0][4], call.inputs[1][5]
    return [(*logical_args(call), ic_bn, oc_bn, m) for m in TILE_SIZES]


# NOTE: a tuning record picks Winograd where it beats the direct kernel's records; without
# records, _untuned_plevel decides (the fallback is F(4x4), the last workload).
strategy.register(OP, KEYS, TEMPLATE, plevel=5, when=_when, workloads=_workloads,
                  transform=lambda args: transform_weight(args[11], args[9], args[10]),
                  epilogue=True, untuned_plevel=_untuned_plevel)
strategy.catalog(TemplateInfo(
    TEMPLATE, "x86", CONV_PARAMS + ("ic_bn", "oc_bn", "m"),
    (1, 56, 56, 64, 64, 3, 3, 1, 1, 32, 32, 4),
    "Winograd F(2x2|4x4, 3x3) conv2d on blocked layouts (NCHW[ic_bn]c in, NCHW[oc_bn]c out, "
    "weights transformed at build time), stride 1"))
