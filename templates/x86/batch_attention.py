"""x86 ``batch_attention`` template: ``out[b] = softmax(q[b] @ k[b].T) @ v[b]`` (softmax over
the last axis) in one kernel, ``q`` ``[B, M, D]``, ``k`` ``[B, N, D]`` (``transpose_b=0``:
``[B, D, N]``), ``v`` ``[B, N, DV]``; with ``scale`` 1 (2) a ``[1]`` operand multiplies
(divides) the scores, and with ``bias_groups=G`` a ``[G, N]`` operand (``bias_rows=1``:
``[G, M, N]``) is added to them, batch ``b`` reading ``bias[b // (B / G)]``, as a
transformer's ``/ sqrt(D)`` and padding (causal) mask do.

The three steps a network runs as ``batch_matmul``, ``softmax``, ``batch_matmul`` meet in one
parallel loop over (batch, tile of ``mb`` query rows): the tile's scores (``mb x N``) are
computed, exponentiated and summed while they sit in cache, then multiplied by ``v``; the
``M x N`` score matrix never goes to memory (three passes over it in the unfused network).
The rows are padded to a multiple of ``mb`` (the padding rows repeat the last query row and
are never written), so the inner loops carry no guard for a prime token count.

- Scores: ``k`` is packed once per call to ``[B, N / bn, D, bn]`` (columns padded with zeros
  to whole vectors), and each ``rb x bn`` block accumulates in registers over ``D`` (as
  :mod:`.batch_matmul` does).
- Softmax: the row maximum and the sum of ``exp`` are lane-wide partial reductions; the
  division by the sum is applied to the output (``DV`` values per row instead of ``N``).
- Output: ``rb_out x dvb`` register blocks over ``N``, broadcasting the exponentials and
  loading rows of ``v``.

Knobs: ``mb`` (rows per tile), ``rb`` and ``bn`` (the score block), ``rb_out`` and ``dvb``
(the output block).
"""

from __future__ import annotations

import math
from typing import Any

from templtune import autotvm, te
from templtune.autotvm import strategy
from templtune.autotvm.space import OtherOptionEntity
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import KEYS
from ._common import (
    block_registers,
    check_positive,
    host_vector,
    register_block,
    register_file,
    schedule_pack,
    target_vector,
    vec_regs,
)

#: rows of a register block, and of a tile (a multiple of both blocks' rows)
ROWS, TILES = (1, 2, 3, 4, 6, 8), (4, 8, 12, 16, 24, 32, 48, 64)
#: reduction steps unrolled in the two products' inner loops
UNROLL = 4
#: the workload's code for the op's ``scale`` attribute
SCALE_CODES = {"": 0, "multiply": 1, "divide": 2}


def _widths(n: int, lanes: int) -> list[int]:
    """Column blocks of 1, 2 or 4 registers, at most ``n`` rounded up to a register."""
    top = -(-n // lanes) * lanes
    return [w for w in (lanes, 2 * lanes, 4 * lanes) if w <= top]


def _out_widths(dv: int, lanes: int) -> list[int]:
    """Output column blocks: 1, 2 or 4 registers dividing ``dv``, else the whole row."""
    return [w for w in (lanes, 2 * lanes, 4 * lanes) if dv % w == 0] or [dv]


def _fits(rows: int, width: int, lanes: int, accs: int, regs: int) -> bool:
    vecs = vec_regs(width, lanes)
    return rows * vecs <= accs and block_registers(rows, vecs) <= regs


def _define(cfg: Any, m: int, n: int, dv: int) -> None:
    lanes, accs = target_vector()
    regs = register_file()
    cfg.define_knob("mb", [t for t in TILES if t <= max(TILES[0], -(-m // 4) * 4)])
    cfg.define_knob("rb", list(ROWS))
    cfg.define_knob("bn", _widths(n, lanes))
    cfg.define_knob("rb_out", list(ROWS))
    cfg.define_knob("dvb", _out_widths(dv, lanes))
    cfg.multi_filter(lambda e: e["mb"].val % e["rb"].val == 0
                     and e["mb"].val % e["rb_out"].val == 0
                     and _fits(e["rb"].val, e["bn"].val, lanes, accs, regs)
                     and _fits(e["rb_out"].val, e["dvb"].val, lanes, accs, regs))
    if cfg.is_fallback:
        hl, hregs = host_vector()
        bn = max(w for w in _widths(n, hl) if w <= 2 * hl)
        dvb = max(w for w in _out_widths(dv, hl) if w <= 4 * hl or w == dv)
        rb = max(r for r in ROWS if r <= 4 and r * vec_regs(bn, hl) <= hregs)
        rb_out = max(r for r in ROWS if r <= 4 and r * vec_regs(dvb, hl) <= hregs)
        # NOTE: 16 rows (or the next multiple of both blocks) keep a tile's scores in L1/L2
        step = math.lcm(rb, rb_out)
        for knob, val in (("mb", -(-min(16, m) // step) * step), ("rb", rb), ("bn", bn),
                          ("rb_out", rb_out), ("dvb", dvb)):
            cfg[knob] = OtherOptionEntity(val)


def _fixed_stages(extra: list[Any], scale: int, groups: int, N: int,  # noqa: N803
                  cols: int) -> tuple[Any, Any] | None:
    """``(c, bias)``, the tensors the scores' copy-out reads (None: no scale or no bias; the
    whole pair None: neither): ``c`` is ``[1]``, the scale or its reciprocal (computed once,
    not a division per score), ``bias`` ``[G, (M,) cols]``, zero-padded to whole column
    blocks."""
    if not scale and not groups:
        return None
    c = bias = None
    if scale:
        sc = extra[0]
        c = sc if scale == 1 else te.compute((1,), lambda z: 1.0 / sc[z], name="scale_inv")
    if groups:
        g = extra[-1]
        lead = tuple(int(d) for d in g.shape[:-1])
        bias = g if cols == N else te.compute(
            (*lead, cols), lambda *i: te.if_then_else(
                i[-1] < N, g[(*i[:-1], te.min(i[-1], N - 1))], te.const(0.0, "float32")),
            name="bias_pad")
    return c, bias


def _batch_attention(B: int, M: int, N: int, D: int, DV: int,  # noqa: N803
                     transpose_b: int = 1, scale: int = 0, bias_groups: int = 0,
                     bias_rows: int = 0) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [q, k, v, (scale,) (bias,) out])`` for the current
    config."""
    check_positive(B=B, M=M, N=N, D=D, DV=DV)
    if scale not in (0, 1, 2):
        raise ValueError(f"scale must be 0 (none), 1 (multiply) or 2 (divide), got {scale!r}")
    if bias_groups < 0 or (bias_groups and B % bias_groups):
        raise ValueError(f"bias_groups must divide the batch {B}, got {bias_groups}")
    if bias_rows not in (0, 1) or (bias_rows and not bias_groups):
        raise ValueError(f"bias_rows must be 0 or 1, and 1 only with bias_groups, got "
                         f"{bias_rows!r}")
    tb = bool(transpose_b)
    cfg = autotvm.get_config()
    _define(cfg, M, N, DV)
    cfg.add_flop(2.0 * B * M * N * (D + DV) + 4.0 * B * M * N)
    mb, rb, bn = cfg["mb"].val, cfg["rb"].val, cfg["bn"].val
    rbo, dvb = cfg["rb_out"].val, cfg["dvb"].val
    lanes, _ = target_vector()
    rows, cols = -(-M // mb) * mb, -(-N // bn) * bn
    zero = te.const(0.0, "float32")

    q = te.placeholder((B, M, D), name="q")
    k = te.placeholder((B, N, D) if tb else (B, D, N), name="k")
    v = te.placeholder((B, N, DV), name="v")
    extra = []
    if scale:
        extra.append(te.placeholder((1,), name="scale"))
    if bias_groups:
        extra.append(te.placeholder((bias_groups, *(M,) * bias_rows, N), name="bias"))

    def pack(b: Any, o: Any, r: Any, w: Any) -> Any:
        col = o * bn + w
        val = k[b, col, r] if tb else k[b, r, col]
        return val if cols == N else te.if_then_else(col < N, val, zero)

    kp = te.compute((B, cols // bn, D, bn), pack, name="k_pack")
    r = te.reduce_axis((0, D), name="r")
    # NOTE: padding rows read the last query row (a valid address); their results are dropped
    scores = te.compute((B, rows, cols), lambda b, i, j: te.sum(
        q[b, te.min(i, M - 1), r] * kp[b, j // bn, r, j % bn], axis=r), name="scores")
    raw, fixed = scores, _fixed_stages(extra, scale, bias_groups, N, cols)
    if fixed:
        # NOTE: the scale and bias apply as a block of scores leaves its registers (a
        # multiply-add per vector); the softmax reads finished scores
        c, bias = fixed
        per = B // bias_groups if bias_groups else 1

        def add(b: Any, i: Any, j: Any) -> Any:
            if bias is None:
                return zero
            # NOTE: padding rows read the last row's mask, as they read the last query row
            return bias[b // per, te.min(i, M - 1), j] if bias_rows else bias[b // per, j]

        scores = te.compute((B, rows, cols), lambda b, i, j: (
            raw[b, i, j] * c[0] if c is not None else raw[b, i, j]) + add(b, i, j),
            name="logits")
    j1 = te.reduce_axis((0, N), name="j1")
    rmax = te.compute((B, rows), lambda b, i: te.max(scores[b, i, j1], axis=j1), name="row_max")
    ex = te.compute((B, rows, N), lambda b, i, j: te.exp(scores[b, i, j] - rmax[b, i]),
                    name="exp")
    j2 = te.reduce_axis((0, N), name="j2")
    rsum = te.compute((B, rows), lambda b, i: te.sum(ex[b, i, j2], axis=j2), name="row_sum")
    j3 = te.reduce_axis((0, N), name="j3")
    acc = te.compute((B, rows, DV), lambda b, i, d: te.sum(ex[b, i, j3] * v[b, j3, d], axis=j3),
                     name="attn_acc")
    out = te.compute((B, M, DV), lambda b, i, d: acc[b, i, d] / rsum[b, i],
                     name="batch_attention")

    s = te.create_schedule(out.op)
    b, i, d = s[out].op.axis
    io, ii = s[out].split(i, factor=mb)
    iio, iii = s[out].split(ii, factor=rbo)
    do, di = s[out].split(d, factor=dvb)
    s[out].reorder(b, io, iio, do, iii, di)
    tile = s[out].fuse(b, io)
    s[out].parallel(tile)
    s[out].vectorize(di)
    # the output block: rb_out rows x dvb columns in registers over N
    register_block(s, acc, s[out], do, UNROLL)
    # the tile's scores: rb x bn blocks accumulated in registers over D
    s[scores].compute_at(s[out], tile)
    # NOTE: the reciprocal and the padded bias stay at the root: computed once per call
    sacc = raw if fixed else s.cache_write(scores, "global")
    _, si, sj = s[scores].op.axis
    sjo, sji = s[scores].split(sj, factor=bn)
    sio, sii = s[scores].split(si, factor=rb)
    s[scores].reorder(sio, sjo, sii, sji)
    s[scores].vectorize(sji)
    register_block(s, sacc, s[scores], sjo, UNROLL)
    # the softmax of the tile's rows, lane-wide
    for red in (rmax, rsum):
        s[red].compute_at(s[out], tile)
        (rr,) = s[red].op.reduce_axis
        _, ki = s[red].split(rr, factor=lanes)
        rf = s.rfactor(red, ki, factor_axis=2)
        s[rf].compute_at(s[out], tile)
        raxes = list(s[rf].leaf_iter_vars[:len(s[rf].op.axis)])
        s[rf].reorder(*raxes[:-1], *s[rf].op.reduce_axis, raxes[-1])
        s[rf].vectorize(raxes[-1])
    s[ex].compute_at(s[out], tile)
    s[ex].vectorize(s[ex].split(s[ex].op.axis[-1], factor=lanes)[1])
    schedule_pack(s[kp], tb, cols == N)
    return s, [q, k, v, *extra, out]


#: the registered templates (call under a dispatch context, e.g. apply_history_best)
batch_attention = autotvm.template("batch_attention")(_batch_attention)
batch_attention_x86 = autotvm.template("batch_attention.x86")(_batch_attention)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    b, m, dv = call.out_shape
    tb = bool(call.attr("transpose_b", True))
    d = call.inputs[0][2]
    n = call.inputs[1][1 if tb else 2]
    scale = SCALE_CODES[str(call.attr("scale", ""))]
    bias = call.inputs[-1] if call.attr("bias", False) else ()
    groups, rows = (bias[0], int(len(bias) == 3)) if bias else (0, 0)
    # NOTE: the flags join the workload only off their defaults, as batch_matmul's do
    full = (b, m, n, d, dv, int(tb), scale, groups, rows)
    return [full[:9 if rows else 8 if scale or groups else 5 if tb else 6]]


strategy.register("nn.batch_attention", KEYS, "batch_attention", plevel=10,
                  when=lambda call: call.dtype == "float32"
                  and not call.attr("transpose_v", False),
                  workloads=_workloads)
strategy.catalog(TemplateInfo(
    "batch_attention", "x86", ("B", "M", "N", "D", "DV", "transpose_b", "scale", "bias_groups",
                               "bias_rows"),
    (4, 33, 37, 16, 16), "out[b] = softmax(c * q[b] @ k[b].T + bias[b // (B / G)]) @ v[b], "
    "q [B, M, D], k [B, N, D] (transpose_b=0: [B, D, N]), v [B, N, DV], scale c [1] "
    "(scale 1: multiply, 2: divide), bias [G, N] (bias_groups G; bias_rows 1: [G, M, N]); "
    "one pass per tile of query rows",
    n_required=5))
