"""x86 Winograd ``conv2d`` template, F(m x m, 3 x 3) with ``m`` (2 or 4) a knob.

NCHW data, OIHW kernel (or, with ``pre_transformed=m``, the kernel already transformed for
F(m x m) to ``[alpha, alpha, CI, CO]`` by ``topi.nn.conv2d_winograd_weight_transform``), NCHW
output; stride 1. Stages:

* ``data_pad``: zero padding, extended so the last (partial) output tile reads inside it;
* ``data_row``, ``data_pack[eps, nu, c, p] = (B^T d B)`` of each ``alpha x alpha`` input
  tile ``p`` (rows, then columns; the row pass of one channel's block of tiles is computed
  at the column pass, which is vectorized over tiles);
* ``kernel_pack[eps, nu, k/bn, c, bn] = (G g G^T)`` unless pre-transformed (then
  ``[alpha, alpha, CI, CO]``, or already blocked with ``kblock=bn``: one register block's
  weights are then one contiguous stream over ``c``);
* ``bgemm[eps, nu, p, k] = sum_c data_pack * kernel_pack``: ``alpha^2`` independent GEMMs,
  scheduled like the dense template (``tp x bn`` register blocks in a write cache, ``bn``
  output channels vectorized, fused ``(eps, nu, k_o)`` parallel);
* ``inverse_row``, ``inverse[p, vh, vw, k] = (A^T M A)`` (rows at columns), vectorized over
  ``k``; ``output`` unpacks to NCHW a 16-channel slab of tile rows at a time.

The transforms are written as explicit sums of the constant matrices' non-zero coefficients
and fully unrolled (see :func:`_tsum`), so no coefficient is loaded or multiplied by zero.

Knobs: ``tile_size`` (``m``), ``tile_k`` ``[k_o, bn]``, ``tile_c`` ``[c_o, c_i]`` (``c_i <= 8``,
unrolled), ``tile_p`` (the register block over tiles; the largest divisor of the tile count not
above it is used, because the tile count depends on ``m``).
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, inline_tail
from templtune.autotvm.strategy import OpCall, TemplateInfo
from templtune.topi.nn.winograd import winograd_transform_matrices
from templtune.topi.utils import const_matrix

from .._strategy import CONV_PARAMS, KEYS, conv_nchw_args, is_conv, pack_blocks, winograd_weights
from ._common import (
    check_positive,
    divisor_at_most,
    host_vector,
    lane_filter,
    max_inner,
    pad_tuple,
    register_block,
    stride_pair,
    target_vector,
    vec_regs,
    vector_divisor,
)
from .conv2d_nchw import out_size

TILE_P = [1, 2, 4, 6, 8, 12]


def _define(cfg: Any, co: int, ci: int, sizes: list[int], kblock: int = 0) -> None:
    cfg.define_knob("tile_size", sizes)
    if kblock:
        cfg.define_split("tile_k", co, num_outputs=2, policy="candidate",
                         candidate=[[co // kblock, kblock]])
    else:
        cfg.define_split("tile_k", co, num_outputs=2, filter=lane_filter(co))
    cfg.define_split("tile_c", ci, num_outputs=2, filter=max_inner(8))
    cfg.define_knob("tile_p", TILE_P)
    t_lanes, t_regs = target_vector()
    cfg.multi_filter(lambda e: e["tile_p"].val * vec_regs(e["tile_k"].size[-1], t_lanes)
                     <= t_regs)
    if cfg.is_fallback:
        bn = kblock or vector_divisor(co, 32)
        cfg.fallback_split("tile_k", [-1, bn])
        cfg.fallback_split("tile_c", [-1, 4])
        cfg["tile_size"] = _other(4 if 4 in sizes else sizes[0])
        lanes, regs = host_vector()
        cfg["tile_p"] = _other(max(v for v in TILE_P if v * vec_regs(bn, lanes) <= regs))


def _tsum(mat: Any, col: Any, term: Any) -> Any:
    """``sum_r mat[r, col] * term(r)`` for a constant matrix and a (to be unrolled) index
    ``col``: a select over the columns, each an explicit sum of its non-zero coefficients
    (``+-1`` as adds and subtracts). Unrolled, the select folds away and no product by 0 is
    left (the codegen does not assume fast-math, so ``x * 0.0`` would otherwise stay)."""
    out = None
    for j in reversed(range(mat.shape[1])):
        acc = None
        for r in range(mat.shape[0]):
            c = float(mat[r, j])
            if c == 0.0:
                continue
            t = term(r)
            if acc is None:
                acc = t if c == 1.0 else -t if c == -1.0 else t * c
            else:
                acc = acc + t if c == 1.0 else acc - t if c == -1.0 else acc + t * c
        if acc is None:
            acc = te.const(0.0, "float32")
        out = acc if out is None else te.select(col == j, acc, out)
    return out


def _other(v: Any) -> Any:
    from templtune.autotvm.task.space import OtherOptionEntity

    return OtherOptionEntity(v)


def _transform_pass(stage: Any, outer: Any, a: Any, b: Any, split: Any, factor: int) -> None:
    """Schedule one constant-matrix transform pass: ``split`` in blocks of ``factor`` (the
    vectorized innermost loop), the ``a x b`` transform points unrolled in between and
    ``outer`` fused with the block loop run in parallel."""
    so, si = stage.split(split, factor=factor)
    stage.reorder(outer, so, a, b, si)
    stage.unroll(a)
    stage.unroll(b)
    stage.parallel(stage.fuse(outer, so))
    stage.vectorize(si)


def _conv2d_winograd(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
                    padding: Any, pre_transformed: int = 0, kblock: int = 0, *,
                    epilogue: Epilogue | None = None) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, output])`` for the current config.

    Arguments as :func:`conv2d_nchw` (stride must be 1, the kernel square); ``pre_transformed``
    is 0 for an OIHW kernel or the tile size ``m`` the kernel was transformed for, then
    ``[alpha, alpha, CI, CO]``, or, with ``kblock=b > 0``, blocked to
    ``[alpha, alpha, CO/b, CI, b]`` (``u.reshape(alpha, alpha, CI, CO // b, b).transpose(0, 1,
    3, 2, 4)``, done once for inference weights; fixes ``bn = b``). ``epilogue`` (a fused
    element-wise tail) is computed as the tiles are unpacked to NCHW; the arguments are then
    ``[data, kernel, *epilogue inputs, fused output]``.
    """
    check_positive(N=N, H=H, W=W, CO=CO, CI=CI, KH=KH, KW=KW)
    if stride_pair(stride) != (1, 1):
        raise ValueError(f"conv2d_winograd needs stride 1, got {stride}")
    if KH != KW:
        raise ValueError(f"conv2d_winograd needs a square kernel, got {KH}x{KW}")
    if pre_transformed not in (0, 2, 4):
        raise ValueError(f"pre_transformed must be 0, 2 or 4, got {pre_transformed}")
    if kblock < 0 or (kblock and (not pre_transformed or CO % kblock)):
        raise ValueError(f"conv2d_winograd: kblock must be 0 or (with pre_transformed) a "
                         f"divisor of CO={CO}, got {kblock}")
    pt, pl, pb, pr = pad_tuple(padding)
    oh = out_size(H, KH, pt, pb, 1)
    ow = out_size(W, KW, pl, pr, 1)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d_winograd: empty output ({oh}x{ow}) for a {H}x{W} input")
    cfg = autotvm.get_config()
    _define(cfg, CO, CI, [pre_transformed] if pre_transformed else [2, 4], kblock)
    cfg.add_flop(2.0 * N * CO * oh * ow * CI * KH * KW)
    m = cfg["tile_size"].val
    r = KH
    alpha = m + r - 1
    nh, nw = -(-oh // m), -(-ow // m)
    P = N * nh * nw
    bn = cfg["tile_k"].size[-1]
    c_i = cfg["tile_c"].size[-1]
    tp = divisor_at_most(P, cfg["tile_p"].val)

    data = te.placeholder((N, CI, H, W), name="data")
    if kblock:
        kernel = te.placeholder((alpha, alpha, CO // bn, CI, bn), name="kernel")
    elif pre_transformed:
        kernel = te.placeholder((alpha, alpha, CI, CO), name="kernel")
    else:
        kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    a_np, b_np, g_np = winograd_transform_matrices(m, r, "float32")
    ph, pw = (nh - 1) * m + alpha, (nw - 1) * m + alpha
    dpad = te.compute(
        (N, CI, ph, pw),
        lambda n, c, y, x: te.if_then_else(
            te.all(y >= pt, y < H + pt, x >= pl, x < W + pl),
            data[n, c, y - pt, x - pl], te.const(0.0, "float32")),
        name="data_pad")
    # NOTE: B^T d B in two passes (rows, then columns): 2 alpha^3 instead of alpha^4 products.
    data_row = te.compute(
        (CI, alpha, alpha, P),
        lambda c, e, x, p: _tsum(b_np, e, lambda ra: dpad[p // (nh * nw), c,
                                                          (p // nw) % nh * m + ra,
                                                          p % nw * m + x]),
        name="data_row")
    data_pack = te.compute(
        (alpha, alpha, CI, P),
        lambda e, u, c, p: _tsum(b_np, u, lambda rb: data_row[c, e, rb, p]),
        name="data_pack")
    if pre_transformed:
        kernel_pack = kernel
    else:
        G = const_matrix(g_np, "G")
        ky = te.reduce_axis((0, r), name="ky")
        kx = te.reduce_axis((0, r), name="kx")
        kernel_pack = te.compute(
            (alpha, alpha, CO // bn, CI, bn),
            lambda e, u, o, c, v: te.sum(kernel[o * bn + v, c, ky, kx] * G[e, ky] * G[u, kx],
                                         axis=[ky, kx]),
            name="kernel_pack")
    rc = te.reduce_axis((0, CI), name="rc")

    def kload(e: Any, u: Any, c: Any, k: Any) -> Any:
        if pre_transformed and not kblock:  # [alpha, alpha, CI, CO]: bn floats per CO stride
            return kernel[e, u, c, k]
        return kernel_pack[e, u, k // bn, c, k % bn]

    # NOTE: kernel_pack is blocked [alpha, alpha, CO/bn, CI, bn]: one register block's weights
    # are one contiguous stream over rc (the transformed weights of a 7x7 layer are 16 MiB for
    # F(2): streamed once per call, they are the GEMM's main cost when there are few tiles).
    bgemm = te.compute(
        (alpha, alpha, P, CO),
        lambda e, u, p, k: te.sum(data_pack[e, u, rc, p] * kload(e, u, rc, k), axis=rc),
        name="bgemm")
    # NOTE: A^T M A in two passes too (rows, then columns).
    inv_row = te.compute(
        (P, m, alpha, CO),
        lambda p, vh, ib, k: _tsum(a_np, vh, lambda ia: bgemm[ia, ib, p, k]),
        name="inverse_row")
    inverse = te.compute(
        (P, m, m, CO),
        lambda p, vh, vw, k: _tsum(a_np, vw, lambda ib: inv_row[p, vh, ib, k]),
        name="inverse")
    output = te.compute(
        (N, CO, oh, ow),
        lambda n, k, y, x: inverse[n * (nh * nw) + (y // m) * nw + x // m, y % m, x % m, k],
        name="output")
    tail = attach(output, epilogue)
    s = te.create_schedule(tail.output.op)
    inline_tail(s, tail, anchor_too=True)
    output = tail.output

    pn, pc, _, _ = s[dpad].op.axis
    s[dpad].parallel(s[dpad].fuse(pn, pc))
    # NOTE: tiles (p) innermost in both passes: the column pass is then vectorized over p.
    pv = divisor_at_most(P, 16)
    # NOTE: the transform matrices are constants: unrolling their loops folds every
    # ``B[i, j]`` into a literal (most are 0 or +-1) instead of a select chain per point.
    e, u, c, p = s[data_pack].op.axis
    _transform_pass(s[data_pack], c, e, u, p, pv)
    # NOTE: the row pass of one channel's ``pv`` tiles (alpha^2 x pv floats) stays in L1.
    s[data_row].compute_at(s[data_pack], s[data_pack].leaf_iter_vars[0])
    _, e, x, p = s[data_row].op.axis
    s[data_row].reorder(p, e, x)
    s[data_row].unroll(e)
    s[data_row].unroll(x)
    if not pre_transformed:
        e, u, o, c, v = s[kernel_pack].op.axis
        s[kernel_pack].parallel(s[kernel_pack].fuse(e, u, o))

    acc = s.cache_write(bgemm, "global")
    e, u, p, k = s[bgemm].op.axis
    po, pi = s[bgemm].split(p, factor=tp)
    ko, ki = s[bgemm].split(k, factor=bn)
    s[bgemm].reorder(e, u, ko, po, pi, ki)
    s[bgemm].parallel(s[bgemm].fuse(e, u, ko))
    s[bgemm].vectorize(ki)
    register_block(s, acc, s[bgemm], po, c_i)

    p, vh, vw, k = s[inverse].op.axis
    _transform_pass(s[inverse], p, vh, vw, k, bn)
    s[inv_row].compute_at(s[inverse], s[inverse].leaf_iter_vars[0])
    _, rvh, rib, rk = s[inv_row].op.axis
    s[inv_row].unroll(rvh)
    s[inv_row].unroll(rib)
    s[inv_row].vectorize(rk)

    # NOTE: unpack one 16-channel slab of tile rows at a time: every cache line read from
    # ``inverse`` (channels innermost) is then used whole while the writes stream along x.
    n, k, y, x = s[output].op.axis
    oko, oki = s[output].split(k, factor=divisor_at_most(CO, 16))
    oyo, oyi = s[output].split(y, factor=m)
    s[output].reorder(n, oko, oyo, oki, oyi, x)
    s[output].unroll(oyi)
    s[output].parallel(s[output].fuse(n, oko, oyo))
    return s, [data, kernel, *tail.extras, output]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
conv2d_winograd = autotvm.template("conv2d_winograd")(_conv2d_winograd)
conv2d_winograd_x86 = autotvm.template("conv2d_winograd.x86")(_conv2d_winograd)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    base = conv_nchw_args(call)
    if not (base[5] == base[6] == 3 and call.attr("strides") == (1, 1)):
        return []
    return [(*base, m, b) for m in (2, 4) for b in pack_blocks(base[3])]


def _transform(args: tuple[Any, ...]) -> Any:
    if len(args) <= 9 or not args[9]:
        return None
    return winograd_weights(args[9], args[10] if len(args) > 10 else 0)


# NOTE: only a tuning record picks Winograd (lower plevel than the direct template).
strategy.register("nn.conv2d", KEYS, "conv2d_winograd", plevel=8,
                  when=lambda call: is_conv(call, "NCHW"), workloads=_workloads,
                  transform=_transform, epilogue=True)
strategy.catalog(TemplateInfo(
    "conv2d_winograd", "x86", CONV_PARAMS + ("pre_transformed", "kblock"),
    (1, 7, 7, 512, 512, 3, 3, 1, 1), "Winograd F(2x2|4x4, 3x3) conv2d, NCHW, stride 1",
    n_required=9))
