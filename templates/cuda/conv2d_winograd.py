"""CUDA Winograd conv2d (NCHW, stride 1) AutoTVM template, ``"conv2d_nchw_winograd.cuda"``.

Five kernels: the weight transform, the input transform, the batched GEMM (the tuned part),
the inverse transform and the output gather; four with ``pre_transformed=1``, which takes the
kernel already transformed to ``U = G g G^T`` as ``[alpha, alpha, CI, CO]``
(``topi.nn.conv2d_winograd_weight_transform``): what ``relay.build`` runs for a constant
weight, transformed once at build time by the strategy's weight transform. That variant is
configured by the records of the plain task (the same config space: the knobs are the GEMM's),
as TVM's ``conv2d_nchw_winograd_without_weight_transform.cuda`` is by its plain task's. Knobs on the GEMM: ``tile_b`` (the fused
``alpha x alpha`` batch axis), ``tile_y`` (output channels) and ``tile_x`` (tiles), each a
4-way split (block, vthread, thread, inner); ``tile_rc`` (2-way split of input channels, one
shared-memory slice per outer step, one register copy per input channel); ``vec`` in
{1, 2, 4} (elements each thread copies per shared-memory load: 4 gives ``float4`` loads where
aligned); ``auto_unroll_max_step`` in {0, 128, 1500} and ``unroll_explicit`` in {0, 1}. The transforms are fixed schedules: one
thread per (channel, tile) with the small ``alpha x alpha`` loops unrolled. Configs over the
target's per-block limits are filtered out (:func:`prune_winograd`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import autotvm, te, topi
from templtune.autotvm import strategy
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import GPU_KEYS, conv_nchw_args, is_conv, winograd_weights
from ._common import (
    BlockUsage,
    bind_tiles,
    block_limits,
    cooperative_fetch,
    prune_over_limits,
    unroll_pragmas,
)

__all__ = ["conv2d_winograd", "prune_winograd"]

_THREADS = 64


def _flat_bind(s: Any, stage: Any, axes: list[Any], threads: int = _THREADS) -> None:
    fused = s[stage].fuse(*axes)
    bx, tx = s[stage].split(fused, factor=threads)
    s[stage].bind(bx, te.thread_axis("blockIdx.x"))
    s[stage].bind(tx, te.thread_axis("threadIdx.x"))


def prune_winograd(cfg: Any, alpha: int) -> None:
    """Drop the batched-GEMM configs over the target's per-block limits
    (:func:`prune_over_limits`; the transform kernels use a fixed 64 threads and no shared
    memory). Threads are the thread factors of ``tile_b/y/x``; shared memory holds one
    ``tile_rc`` slice of both packed operands over the ``(eps, nu)`` pairs a block's run of
    the fused batch axis covers (:func:`_covered`); registers per thread are the accumulators
    and the register copies of one input channel of both operands, once per virtual
    thread."""

    def threads(b: Any, y: Any, x: Any) -> Any:
        return b[2] * y[2] * x[2]

    def usage(b: Any, y: Any, x: Any, rc: Any) -> BlockUsage:
        pairs, own = _covered(b[1] * b[2] * b[3], alpha), _covered(b[3], alpha)
        shared = 4 * pairs * rc[1] * (y[1] * y[2] * y[3] + x[1] * x[2] * x[3])
        words = b[1] * y[1] * x[1] * own * (y[3] * x[3] + y[3] + x[3])
        return BlockUsage(threads(b, y, x), shared, words)

    prune_over_limits(cfg, ("tile_b", "tile_y", "tile_x", "tile_rc"), usage, threads,
                      thread_knobs=3)


def _covered(run: Any, alpha: int) -> Any:
    """``(eps, nu)`` pairs in the tile of a run of ``run`` fused ``eps * alpha + nu`` indices,
    as bound inference sizes it: the run itself when it is whole rows or divides a row; whole
    rows around it when its remainder divides a row (9 of 6 x 6: 2 rows); else all pairs."""
    rem = run % alpha
    aligned = (rem == 0) | (alpha % run == 0)
    rows = np.where(alpha % np.maximum(rem, 1) == 0, run // alpha + 1, alpha)
    return np.where(aligned, run, rows * alpha)


def _bgemm(cfg: Any, s: Any, bgemm: Any) -> None:
    kernel_pack, data_pack = s[bgemm].op.input_tensors
    acc = s.cache_write(bgemm, "local")
    a_sh = s.cache_read(kernel_pack, "shared", [acc])
    b_sh = s.cache_read(data_pack, "shared", [acc])
    a_reg = s.cache_read(a_sh, "local", [acc])
    b_reg = s.cache_read(b_sh, "local", [acc])

    eps, nu, y, x = s[bgemm].op.axis
    b = s[bgemm].fuse(eps, nu)
    (rc,) = s[acc].op.reduce_axis
    cfg.define_split("tile_b", b, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=2)
    cfg.define_knob("vec", [1, 2, 4])
    cfg.define_knob("auto_unroll_max_step", [0, 128, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    prune_winograd(cfg, int(bgemm.shape[0]))

    bz, vz, tz, zi = cfg["tile_b"].apply(s, bgemm, b)
    by, vy, ty, yi = cfg["tile_y"].apply(s, bgemm, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, bgemm, x)
    s[bgemm].reorder(bz, by, bx, vz, vy, vx, tz, ty, tx, zi, yi, xi)
    bind_tiles(s[bgemm], (bz, vz, tz), (by, vy, ty), (bx, vx, tx))
    s[acc].compute_at(s[bgemm], tx)

    b1, b2, y, x = s[acc].op.axis
    (rc,) = s[acc].op.reduce_axis
    rco, rci = cfg["tile_rc"].apply(s, acc, rc)
    s[acc].reorder(rco, rci, b1, b2, y, x)
    for load in (a_sh, b_sh):
        s[load].compute_at(s[acc], rco)
        cooperative_fetch(s, load, [(cfg["tile_b"].size[2], "threadIdx.z"),
                                    (cfg["tile_y"].size[2], "threadIdx.y"),
                                    (cfg["tile_x"].size[2], "threadIdx.x")],
                          vector=cfg["vec"].val)
    # register tiles: each input channel's operands are read from shared memory once per
    # thread, then reused across the thread's outputs
    for reg in (a_reg, b_reg):
        s[reg].compute_at(s[acc], rci)
    unroll_pragmas(cfg, s[bgemm], bz)


def _conv2d_winograd(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int,
                    padding: Any, tile_size: int = 2, pre_transformed: int = 0
                    ) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, output])`` for the current config;
    ``kernel`` is OIHW, or ``[alpha, alpha, CI, CO]`` (``alpha = tile_size + KH - 1``) with
    ``pre_transformed=1``."""
    if pre_transformed not in (0, 1):
        raise ValueError(f"pre_transformed must be 0 or 1, got {pre_transformed}")
    if KH != KW:
        raise ValueError(f"conv2d_nchw_winograd.cuda needs a square kernel, got {KH}x{KW}")
    data = te.placeholder((N, CI, H, W), name="data")
    alpha = tile_size + KH - 1
    kernel = te.placeholder((alpha, alpha, CI, CO) if pre_transformed else (CO, CI, KH, KW),
                            name="kernel")
    output = topi.nn.conv2d_winograd_nchw(data, kernel, padding, tile_size=tile_size,
                                          pre_transformed=bool(pre_transformed))
    s = te.create_schedule([output.op])
    cfg = autotvm.get_config()

    inverse = s[output].op.input_tensors[0]
    bgemm = s[inverse].op.input_tensors[0]
    kernel_pack, data_pack = s[bgemm].op.input_tensors
    d = s[data_pack].op.input_tensors[0]
    data_pad = s[d].op.input_tensors[0]
    s[data_pad].compute_inline()
    s[d].compute_inline()
    # the transform matrices are constant computes: inline them so they fold into the code
    for stage in (kernel_pack, data_pack, inverse):
        for t in s[stage].op.input_tensors:
            if getattr(t.op, "tag", "") == "const_matrix" or t.op.name in ("A", "B", "G"):
                s[t].compute_inline()

    # NOTE: the fixed transform kernels must fit a target of fewer threads per block too
    lim = block_limits()
    threads = min(_THREADS, lim.threads) if lim else _THREADS
    # weight and input transforms: one thread per (channel, tile), alpha x alpha unrolled
    for stage in (data_pack,) if pre_transformed else (kernel_pack, data_pack):
        eps, nu, c, p = s[stage].op.axis
        r_a, r_b = s[stage].op.reduce_axis
        s[stage].reorder(c, p, eps, nu, r_a, r_b)
        for ax in (eps, nu, r_a, r_b):
            s[stage].unroll(ax)
        _flat_bind(s, stage, [c, p], threads)

    _bgemm(cfg, s, bgemm)

    k, p, vh, vw = s[inverse].op.axis
    r_a, r_b = s[inverse].op.reduce_axis
    s[inverse].reorder(k, p, vh, vw, r_a, r_b)
    for ax in (vh, vw, r_a, r_b):
        s[inverse].unroll(ax)
    _flat_bind(s, inverse, [k, p], threads)

    _flat_bind(s, output, list(s[output].op.axis), threads)
    return s, [data, kernel, output]


conv2d_winograd = autotvm.template("conv2d_nchw_winograd.cuda")(_conv2d_winograd)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    n, h, w, co, ci, kh, kw, _, pad = conv_nchw_args(call)
    if not (kh == kw == 3 and call.attr("strides") == (1, 1)):
        return []
    # NOTE: the pre-transformed variant first: on equal recorded costs (the two share their
    # plain task's records) it wins wherever the weight is a constant
    return [(n, h, w, co, ci, kh, kw, pad, m, *pt) for m in (2, 4) for pt in ((1,), ())]


def _transform(args: tuple[Any, ...]) -> Any:
    return winograd_weights(args[8]) if len(args) > 9 and args[9] else None


def _tuned_as(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return args[:9]


def _fallback(call: OpCall, target: Any, impls: Any) -> Any:
    """The last (plain) implementation, or its pre-transformed variant where usable."""
    plain = impls[-1]
    return next((i for i in impls if i.workload == plain.workload and i.transform is not None),
                plain)


# NOTE: only a tuning record picks Winograd (lower plevel than the direct template).
strategy.register("nn.conv2d", GPU_KEYS, "conv2d_nchw_winograd.cuda", plevel=8,
                  when=lambda call: is_conv(call, "NCHW"), workloads=_workloads,
                  transform=_transform, tuned_as=_tuned_as, fallback=_fallback)
strategy.catalog(TemplateInfo(
    "conv2d_nchw_winograd.cuda", "cuda",
    ("N", "H", "W", "CO", "CI", "KH", "KW", "padding", "tile_size", "pre_transformed"),
    (1, 14, 14, 256, 256, 3, 3, 1, 2), "Winograd F(2x2|4x4, 3x3) conv2d, NCHW, stride 1 "
    "(pre_transformed=1: kernel as [alpha, alpha, CI, CO])", n_required=8, target="cuda"))
