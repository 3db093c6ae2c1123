"""x86 ``batch_matmul`` template: ``out[b, m, n] = sum_k x[b, m, k] * y[b, n, k]`` in TVM's
default layout (``transpose_b=True``: ``x`` is ``[B, M, K]``, ``y`` is ``[B, N, K]``); the
optional arguments ``transpose_a`` (``x`` is ``[B, K, M]``) and ``transpose_b=0`` (``y`` is
``[B, K, N]``) take the other layouts, as ``nn.batch_matmul``'s flags do.

Scheduled like :mod:`.dense`, per batch: ``y`` is packed inside the kernel to
``[B, N / bn, K, bn]`` (vector loads along ``n``; from ``[B, K, N]`` the packing copies whole
``bn``-wide rows); the output is tiled ``mb x bn`` with a
register-resident accumulator (write cache) per tile, whose rows are blocked by ``rb``
(unrolled) over an unrolled ``ku`` step of ``k``; ``bn`` is vectorized. The fused
(batch, row tile) loop runs in parallel, and with ``par_n`` the column tiles join it (for
few rows per batch).

Knobs: ``tile_y`` ``[mo, mb, rb]`` (rows; with a partial last block of ``rb`` rows when
``mo`` divides ``M`` but ``rb`` not ``M / mo``, see :mod:`.row_blocks`; such a tile runs its
row blocks outside the column tiles), ``tile_x`` ``[no, bn]`` (columns, ``bn`` a multiple of 8
when ``N`` allows; where no multiple of 8 divides ``N``, as with 197 tokens, also ``[ceil(N /
bn), bn]`` over ``N`` padded to whole vectors with zeros, the last tile's copy to the output
guarded), ``tile_k`` ``[ko, ku]`` (``ku <= 8``), ``par_n``.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.strategy import OpCall, TemplateInfo
from templtune.autotvm.task.knobs import SplitEntity

from .._strategy import KEYS
from ._common import (
    check_positive,
    divisor_at_most,
    has_lane_multiple,
    host_vector,
    inner_sizes,
    lane_filter,
    max_inner,
    padded_widths,
    register_file,
    schedule_pack,
    target_vector,
    vec_regs,
    vector_divisor,
)
from .row_blocks import fallback_rows, row_splits, tile_filter, tile_rows

#: most rows of a register block, and of a tile
MAX_ROWS, MAX_TILE_ROWS = 8, 256


def _define(cfg: Any, m: int, n: int, k: int) -> None:
    t_lanes, t_regs = target_vector()
    keep_x = lane_filter(n)
    exact = inner_sizes(n, keep_x)
    pad = not has_lane_multiple(n)  # no whole vector divides N: offer padded columns
    padded = padded_widths(n, t_lanes) if pad else []
    cfg.define_split("tile_y", m, num_outputs=3, policy="candidate", candidate=row_splits(
        m, [vec_regs(b, t_lanes) for b in exact + padded], register_file(), MAX_ROWS,
        MAX_TILE_ROWS),
        filter=tile_filter(m, MAX_ROWS, MAX_TILE_ROWS))
    if pad:
        # NOTE: the exact splits first, in the factors policy's order, then the padded widths
        cfg.define_split("tile_x", n, num_outputs=2, policy="candidate",
                         candidate=[[-1, b] for b in exact] + [[-(-n // b), b] for b in padded])
    else:
        cfg.define_split("tile_x", n, num_outputs=2, filter=keep_x)
    cfg.define_split("tile_k", k, num_outputs=2, filter=max_inner(8))
    cfg.define_knob("par_n", [False, True])
    cfg.multi_filter(lambda e: e["tile_y"].size[-1] * vec_regs(e["tile_x"].size[-1], t_lanes)
                     <= t_regs)
    if cfg.is_fallback:
        lanes, regs = host_vector()
        # NOTE: the padded width nearest two registers, as vector_divisor prefers
        bn = (min(padded_widths(n, lanes), key=lambda b: (abs(b - 2 * lanes), b)) if pad
              else vector_divisor(n))
        rows = fallback_rows(m, vec_regs(bn, lanes), register_file(), MAX_ROWS, MAX_TILE_ROWS,
                             regs)
        if tile_rows(m, rows) % rows[-1]:  # a partial block beats the exact ones
            cfg["tile_y"] = SplitEntity(rows)
        else:
            rb = divisor_at_most(m, max(1, regs // vec_regs(bn, lanes)))
            cfg.fallback_split("tile_y", [-1, 32 // rb if m >= 32 else 1, rb])
        cfg["tile_x"] = SplitEntity([-(-n // bn), bn])
        cfg.fallback_split("tile_k", [-1, 4])


def _batch_matmul(B: int, M: int, N: int, K: int, transpose_a: int = 0,  # noqa: N803
                  transpose_b: int = 1) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [x, y, out])`` for the current config."""
    check_positive(B=B, M=M, N=N, K=K)
    ta, tb = bool(transpose_a), bool(transpose_b)
    cfg = autotvm.get_config()
    _define(cfg, M, N, K)
    cfg.add_flop(2.0 * B * M * N * K)
    rows, rb = tile_rows(M, cfg["tile_y"].size), cfg["tile_y"].size[-1]
    bn = cfg["tile_x"].size[-1]
    ku = cfg["tile_k"].size[-1]

    x = te.placeholder((B, K, M) if ta else (B, M, K), name="x")
    y = te.placeholder((B, N, K) if tb else (B, K, N), name="y")
    cols = -(-N // bn) * bn  # N, or N padded to whole vectors: the padding packs zeros

    def pack(b: Any, o: Any, r: Any, v: Any) -> Any:
        col = o * bn + v
        val = y[b, col, r] if tb else y[b, r, col]
        if cols == N:
            return val
        return te.if_then_else(col < N, val, te.const(0.0, "float32"))

    packed = te.compute((B, cols // bn, K, bn), pack, name="y_pack")
    kr = te.reduce_axis((0, K), name="k")
    prod = te.compute((B, M, cols), lambda b, i, j: te.sum(
        (x[b, kr, i] if ta else x[b, i, kr]) * packed[b, j // bn, kr, j % bn], axis=kr),
        name="batch_matmul")
    if cols == N:
        s = te.create_schedule(prod.op)
        out, acc = prod, s.cache_write(prod, "global")
    else:
        # NOTE: the accumulator covers whole padded tiles (guard-free vector FMAs); only the
        # copy of the last column tile into the output is guarded
        out = te.compute((B, M, N), lambda b, i, j: prod[b, i, j], name="batch_matmul_out")
        s = te.create_schedule(out.op)
        acc = prod
    b, i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=rows)
    jo, ji = s[out].split(j, factor=bn)
    if rows % rb or rows > MAX_TILE_ROWS:
        # NOTE: a tile with a partial last block (or a wide one) runs its row blocks outside
        # the column tiles, as exact rb-row tiles do: the block's x rows stay in L1 while
        # packed y streams from L2, and the serial block loop lets lowering peel the last one.
        iio, ii = s[out].split(ii, factor=rb)
        s[out].reorder(b, io, iio, jo, ii, ji)
        outer = [b, io, iio] if cfg["par_n"].val else [b, io]
        s[out].parallel(s[out].fuse(*outer))
        attach = jo
    elif cfg["par_n"].val:
        s[out].reorder(b, io, jo, ii, ji)
        attach = s[out].fuse(b, io, jo)
        s[out].parallel(attach)
    else:
        s[out].reorder(b, io, jo, ii, ji)
        s[out].parallel(s[out].fuse(b, io))
        attach = jo
    s[out].vectorize(ji)
    s[acc].compute_at(s[out], attach)
    _, ai, aj = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    ko, ki = s[acc].split(ak, factor=ku)
    aio, aii = s[acc].split(ai, factor=rb)
    s[acc].reorder(aio, ko, ki, aii, aj)
    s[acc].unroll(ki)
    s[acc].unroll(aii)
    s[acc].vectorize(aj)
    # NOTE: read y's rows contiguously: v outside r from [B, N, K] (as dense packs its
    # weight), whole vectors of a row from [B, K, N]
    schedule_pack(s[packed], tb, cols == N)
    return s, [x, y, out]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
batch_matmul = autotvm.template("batch_matmul")(_batch_matmul)
batch_matmul_x86 = autotvm.template("batch_matmul.x86")(_batch_matmul)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    ta, tb = bool(call.attr("transpose_a", False)), bool(call.attr("transpose_b", True))
    b, m, n = call.out_shape
    k = call.inputs[0][1 if ta else 2]
    # NOTE: the flags join the workload only off their defaults: keys stay those of before
    return [(b, m, n, k) if (ta, tb) == (False, True) else (b, m, n, k, int(ta), int(tb))]


strategy.register("nn.batch_matmul", KEYS, "batch_matmul", plevel=10,
                  # NOTE: equal batches only; a broadcast batch of 1 takes the default schedule.
                  when=lambda call: call.dtype == "float32"
                  and call.inputs[0][0] == call.inputs[1][0],
                  workloads=_workloads)
strategy.catalog(TemplateInfo(
    "batch_matmul", "x86", ("B", "M", "N", "K", "transpose_a", "transpose_b"),
    (8, 128, 128, 64), "out[b] = x[b] @ y[b].T, x [B, M, K] (transpose_a=1: [B, K, M]), "
    "y [B, N, K] (transpose_b=0: [B, K, N]), register-blocked tiles", n_required=4))
