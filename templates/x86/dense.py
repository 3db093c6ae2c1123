"""x86 ``dense`` template: ``out[m, n] = sum_k data[m, k] * weight[n, k]``.

The weight is packed inside the kernel to ``[N / bn, K, bn]`` (vector loads along ``n``); the
output is tiled ``(mb * rb) x (nb * bn)`` with a write cache per tile, computed one register
block of ``rb`` rows (unrolled, one broadcast each) x ``bn`` columns (vectorized) at a time, over
an unrolled ``ku`` step of ``k``. Inside a tile the ``nb`` column blocks of a row block follow
each other (its ``rb`` data rows are read again from cache while the weight block streams); the
fused (column tile, row tile) loop runs in parallel, column tiles outermost, so consecutive row
tiles reuse the same ``K x nb * bn`` weight block from L2. With batch 1 the column tiles carry
the parallelism.

``prepacked=b`` takes the weight already packed (see :func:`_dense`). Batch 1 with a plain
weight (``K`` a multiple of the vector lanes) takes a GEMV path instead that reads the weight
in place (:func:`_gemv`; knobs ``tile_x`` ``[no, nb]`` rows per block, ``tile_k`` ``[ko, ku]``
over ``K / lanes``, ``rows_inner``): packing it per call cost more than the product.

Knobs (TVM's ``dense_pack.x86`` names and arities): ``tile_y`` ``[mo, mb, rb]`` (rows, ``rb <=
16``; tiles of ``M / mo`` rows whose last block of ``rb`` is partial where no exact block has
as many accumulators, see :mod:`.row_blocks`), ``tile_x`` ``[no, nb, bn]`` (columns, ``bn``
a multiple of 8 filling whole vector registers when ``N`` allows), ``tile_k`` ``[ko, ku]`` (``ku <= 8``). The register block ``rb x
bn`` is kept to those that fit the target's vector register file with their operands and have
enough accumulators to cover the FMA latency (:func:`~._common.block_registers`,
:func:`~._common.chain_floor`). A record of the older two-way ``tile_x`` ``[no, bn]`` does
not fit this space (it is rejected at load with a warning); ``[no, 1, bn]`` is its tile.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, attach, inline_tail, output_stage
from templtune.autotvm.strategy import OpCall, TemplateInfo
from templtune.autotvm.task.knobs import SplitEntity

from .._strategy import KEYS, fallback_packed, pack_blocks, pack_dense
from ._common import (
    block_registers,
    chain_floor,
    check_positive,
    divisor_at_most,
    host_vector,
    inner_sizes,
    lane_filter,
    max_inner,
    register_file,
    target_vector,
    vec_regs,
    whole_vector_divisor,
)
from .row_blocks import fallback_rows, row_splits, tile_filter, tile_rows

#: most rows of a register block (unrolled; one broadcast each)
MAX_ROWS = 16
#: most rows of a tile (``mb * rb``) and most columns (``nb * bn``)
MAX_TILE_ROWS, MAX_TILE_COLS = 256, 512
#: columns of the fallback's tile: the ``rb`` data rows are reused from cache across them
FALLBACK_TILE_COLS = 128


def _define(cfg: Any, m: int, n: int, k: int, prepacked: int) -> None:
    t_lanes, _ = target_vector()
    t_file = register_file()
    keep = lane_filter(n, lanes=t_lanes)
    widths = [prepacked] if prepacked else inner_sizes(n, keep)
    # NOTE: knobs in their original order: a config's index depends on it (logged records).
    cfg.define_split("tile_y", m, num_outputs=3, policy="candidate", candidate=row_splits(
        m, [vec_regs(b, t_lanes) for b in widths], t_file, MAX_ROWS, MAX_TILE_ROWS),
        filter=tile_filter(m, MAX_ROWS, MAX_TILE_ROWS))
    if prepacked:
        blocks = n // prepacked
        cfg.define_split("tile_x", n, num_outputs=3, policy="candidate", candidate=[
            [blocks // nb, nb, prepacked] for nb in range(1, blocks + 1)
            if blocks % nb == 0 and nb * prepacked <= MAX_TILE_COLS])
    else:
        cfg.define_split("tile_x", n, num_outputs=3, filter=lambda e: keep(e) and int(
            e.size[-1]) * int(e.size[-2]) <= MAX_TILE_COLS)
    cfg.define_split("tile_k", k, num_outputs=2, filter=max_inner(8))
    # NOTE: the register block rb x bn must fit the register file with its operands (else the
    # inner loop spills) and should have enough accumulators to cover the FMA latency.
    row_blocks = [r for r in range(1, MAX_ROWS + 1) if m % r == 0]
    floor = chain_floor([(r, vec_regs(b, t_lanes)) for r in row_blocks for b in widths],
                        t_file)

    def fits(e: Any) -> bool:
        rb, nv = e["tile_y"].size[-1], vec_regs(e["tile_x"].size[-1], t_lanes)
        return block_registers(rb, nv) <= t_file and rb * nv >= floor

    cfg.multi_filter(fits)
    if cfg.is_fallback:
        lanes, acc = host_vector()
        bn = prepacked or whole_vector_divisor(n, lanes)
        # NOTE: one row block per tile (or a few, when a partial block lets them be taller)
        # across ~128 columns: its data rows stay cached and the next tile (next rows) reuses
        # the K x 128 weight block from L2.
        cfg["tile_y"] = SplitEntity(fallback_rows(m, vec_regs(bn, lanes), register_file(),
                                                  MAX_ROWS, MAX_TILE_ROWS, acc))
        nb = divisor_at_most(n // bn, max(1, FALLBACK_TILE_COLS // bn))
        cfg.fallback_split("tile_x", [-1, nb, bn])
        cfg.fallback_split("tile_k", [-1, divisor_at_most(k, 4)])


def _gemv_lanes(m: int, k: int, prepacked: int) -> int:
    """Vector lanes of the batch-1 path (0: not taken): plain weights, one row, ``K`` a
    multiple of the lanes."""
    lanes, _ = target_vector()
    return lanes if m == 1 and not prepacked and k % lanes == 0 else 0


def _define_gemv(cfg: Any, n: int, k: int, lanes: int) -> None:
    cfg.define_split("tile_x", n, num_outputs=2, filter=max_inner(16))
    cfg.define_split("tile_k", k // lanes, num_outputs=2, filter=max_inner(8))
    cfg.define_knob("rows_inner", [True, False])
    if cfg.is_fallback:
        cfg.fallback_split("tile_x", [-1, divisor_at_most(n, 8)])
        cfg.fallback_split("tile_k", [-1, divisor_at_most(k // lanes, 4)])


def _gemv(N: int, K: int, lanes: int, epilogue: Epilogue | None = None
          ) -> tuple[Any, list[Any]]:
    """Batch 1, plain ``[N, K]`` weight: no repacking. Each weight row is read once,
    contiguously: ``nb`` rows at a time accumulate ``lanes``-wide partial dot products in
    registers (``partial[n, v]``, ``ku`` steps of ``k`` unrolled), summed across the lanes at the
    end. Memory-bound: the weight streams through once per call."""
    cfg = autotvm.get_config()
    _define_gemv(cfg, N, K, lanes)
    cfg.add_flop(2.0 * N * K)
    nb = cfg["tile_x"].size[-1]
    ku = cfg["tile_k"].size[-1]
    data = te.placeholder((1, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    ko = te.reduce_axis((0, K // lanes), name="ko")
    partial = te.compute((N, lanes), lambda j, v: te.sum(
        data[0, ko * lanes + v] * weight[j, ko * lanes + v], axis=ko), name="partial")
    rv = te.reduce_axis((0, lanes), name="rv")
    out = te.compute((1, N), lambda i, j: te.sum(partial[j, rv], axis=rv), name="dense")
    tail = attach(out, epilogue)
    s = te.create_schedule(tail.output.op)
    inline_tail(s, tail)
    final = tail.output
    _, x = s[final].op.axis
    xo, xi = s[final].split(x, factor=nb)
    s[final].parallel(xo)
    if tail.fused:  # the lane sums of each row, then its tail
        s[out].compute_at(s[final], xi)
    s[partial].compute_at(s[final], xo)
    pj, pv = s[partial].op.axis
    (pk,) = s[partial].op.reduce_axis
    pko, pki = s[partial].split(pk, factor=ku)
    if cfg["rows_inner"].val:
        # NOTE: nb rows interleaved: nb independent accumulators hide the FMA latency.
        s[partial].reorder(pko, pki, pj, pv)
        s[partial].unroll(pj)
    else:  # one row after the other: a single sequential stream per row
        s[partial].reorder(pj, pko, pki, pv)
    s[partial].unroll(pki)
    s[partial].vectorize(pv)
    return s, [data, weight, *tail.extras, final]


def _dense(M: int, N: int, K: int, prepacked: int = 0, *, epilogue: Epilogue | None = None
           ) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, weight, out])`` for the current config.

    ``prepacked=b > 0`` takes the weight already packed to ``[N / b, K, b]`` (``w.reshape(N //
    b, b, K).transpose(0, 2, 1)``, as an inference graph would do once) and fixes ``bn = b``.
    ``epilogue`` (a fused element-wise tail) runs in the output stage, on each register tile:
    the arguments are then ``[data, weight, *epilogue inputs, fused out]``.
    """
    check_positive(M=M, N=N, K=K)
    if prepacked < 0 or (prepacked and N % prepacked):
        raise ValueError(f"dense: prepacked must be 0 or a divisor of N={N}, got {prepacked}")
    lanes = _gemv_lanes(M, K, prepacked)
    if lanes:
        return _gemv(N, K, lanes, epilogue)
    cfg = autotvm.get_config()
    _define(cfg, M, N, K, prepacked)
    cfg.add_flop(2.0 * M * N * K)
    rows, rb = tile_rows(M, cfg["tile_y"].size), cfg["tile_y"].size[-1]
    _, nb, bn = cfg["tile_x"].size
    ku = cfg["tile_k"].size[-1]

    data = te.placeholder((M, K), name="data")
    kr = te.reduce_axis((0, K), name="k")
    if prepacked:
        weight = packed = te.placeholder((N // bn, K, bn), name="weight")
    else:
        weight = te.placeholder((N, K), name="weight")
        packed = te.compute((N // bn, K, bn), lambda x, y, z: weight[x * bn + z, y],
                            name="weight_pack")
    out = te.compute((M, N), lambda i, j: te.sum(data[i, kr] * packed[j // bn, kr, j % bn],
                                                 axis=kr), name="dense")
    tail = attach(out, epilogue)
    s = te.create_schedule(tail.output.op)
    out, acc = output_stage(s, tail)
    y, x = s[out].op.axis
    yo, yi = s[out].split(y, factor=rows)
    xo, xi = s[out].split(x, factor=nb * bn)
    # NOTE: column tiles outermost: consecutive row tiles (and threads) share the weight block
    # in L2; row tiles outermost streamed the weight once per tile (slower at 1024^3).
    s[out].reorder(xo, yo, yi, xi)
    fused = s[out].fuse(xo, yo)
    s[out].parallel(fused)
    s[out].vectorize(s[out].split(xi, factor=bn)[1])
    s[acc].compute_at(s[out], fused)
    ay, ax = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    ko, ki = s[acc].split(ak, factor=ku)
    ayo, ayi = s[acc].split(ay, factor=rb)
    axo, axi = s[acc].split(ax, factor=bn)
    s[acc].reorder(ayo, axo, ko, ki, ayi, axi)
    s[acc].unroll(ki)
    s[acc].unroll(ayi)
    s[acc].vectorize(axi)
    if not prepacked:
        # NOTE: z vectorized: each step gathers one float of bn weight rows (their cache lines
        # stay in L1 for the next steps) and stores one contiguous vector, where scalar
        # copies reading the rows contiguously (z outside y) were much slower (results/gemm.txt).
        px, _, pz = s[packed].op.axis
        s[packed].vectorize(pz)
        s[packed].parallel(px)
    return s, [data, weight, *tail.extras, out]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
dense = autotvm.template("dense")(_dense)
dense_x86 = autotvm.template("dense.x86")(_dense)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    (m, k), n = call.inputs[0], call.out_shape[1]
    return [(m, n, k, b) for b in pack_blocks(n)] + [(m, n, k)]


def _transform(args: tuple[Any, ...]) -> Any:
    return pack_dense(args[3]) if len(args) > 3 and args[3] else None


strategy.register("nn.dense", KEYS, "dense", plevel=10,
                  when=lambda call: call.dtype == "float32", workloads=_workloads,
                  transform=_transform, fallback=fallback_packed("tile_x"), epilogue=True)
strategy.catalog(TemplateInfo(
    "dense", "x86", ("M", "N", "K", "prepacked"), (1, 1000, 512),
    "out = data @ weight.T, data [M, K], weight [N, K] (or prepacked [N/b, K, b])",
    n_required=3))
