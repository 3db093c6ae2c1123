"""CUDA dense (``data @ weight.T``) AutoTVM template, registered as ``"dense.cuda"``.

Knobs: ``tile_y`` / ``tile_x`` (4-way splits of the batch and output axes: block, vthread,
thread, inner), ``tile_k`` (3-way reduction split: each outer step fetches one k-slice of both
operands into shared memory, each middle step copies the thread's rows of it into registers),
``vec`` in {1, 2, 4} (elements each thread copies per shared-memory load: 4 gives ``float4``
loads where the rows are aligned), ``pad`` in {0, 1} (1 pads the shared rows to a stride of
``8n + 1`` words, so that threads reading different rows of the same column hit different
banks; the float4 stores into shared memory then become element stores),
``double_buffer`` in {0, 1} (1 double-buffers both shared tiles, as TVM's
``dense_large_batch.gpu``: twice the shared memory, the next k-slice fetched while the current
one is used, one barrier per outer k-step instead of two),
``auto_unroll_max_step`` in {0, 64, 512} and ``unroll_explicit`` in {0, 1}. A thread
accumulates a ``(vthread x inner)`` register tile of the output. Configs over the target's
per-block limits are filtered out (:func:`prune_dense`).
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te, topi
from templtune.autotvm import strategy
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import GPU_KEYS
from ._common import BlockUsage, cooperative_fetch, prune_over_limits, unroll_pragmas

__all__ = ["dense", "padded_row", "prune_dense"]

_VECTOR = (1, 2, 4)
#: the shared rows' stride with ``pad``: ``_PAD[1]`` modulo ``_PAD[0]`` words
_PAD = (8, 1)


def padded_row(k_in: Any, pad: Any) -> Any:
    """Words per shared row of a ``k_in``-element k-slice (the lowering's storage_align)."""
    return k_in + pad * ((_PAD[1] - k_in) % _PAD[0])


def prune_dense(cfg: Any, in_dim: int | None = None) -> None:
    """Drop the configs over the target's per-block limits (:func:`prune_over_limits`): the
    threads are the thread factors of ``tile_y`` and ``tile_x``; shared memory holds the
    block's rows of both operands for one outer k-step, twice with ``double_buffer`` where
    the reduction (``in_dim`` long; unknown: assume so) takes more than one k-step; registers
    per thread are the accumulators and the register copies of both operands, once per
    virtual thread."""

    def threads(y: Any, x: Any) -> Any:
        return y[2] * x[2]

    def usage(y: Any, x: Any, k: Any, pad: Any, db: Any) -> BlockUsage:
        blk_y, blk_x = y[1] * y[2] * y[3], x[1] * x[2] * x[3]
        row = padded_row(k[1] * k[2], pad[0])
        words = y[1] * x[1] * (y[3] * x[3] + y[3] * k[2] + x[3] * k[2])
        # NOTE: a double buffer is two tiles, unless one k-step covers the whole reduction
        steps = k[1] * k[2] < in_dim if in_dim is not None else 1
        halves = 1 + db[0] * steps
        return BlockUsage(threads(y, x), 4 * row * (blk_y + blk_x) * halves, words)

    prune_over_limits(cfg, ("tile_y", "tile_x", "tile_k", "pad", "double_buffer"), usage,
                      threads, thread_knobs=2)


def _dense(batch: int, in_dim: int, out_dim: int, dtype: str = "float32"
          ) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, weight, out])`` for the current config."""
    data = te.placeholder((batch, in_dim), name="data", dtype=dtype)
    weight = te.placeholder((out_dim, in_dim), name="weight", dtype=dtype)
    out = topi.nn.dense(data, weight)
    s = te.create_schedule([out.op])
    cfg = autotvm.get_config()

    i, j = s[out].op.axis
    (k,) = s[out].op.reduce_axis
    cfg.define_split("tile_y", i, num_outputs=4)
    cfg.define_split("tile_x", j, num_outputs=4)
    cfg.define_split("tile_k", k, num_outputs=3)
    cfg.define_knob("vec", list(_VECTOR))
    cfg.define_knob("pad", [0, 1])
    cfg.define_knob("double_buffer", [0, 1])
    cfg.define_knob("auto_unroll_max_step", [0, 64, 512])
    cfg.define_knob("unroll_explicit", [0, 1])
    prune_dense(cfg, in_dim)

    acc = s.cache_write(out, "local")
    data_sh = s.cache_read(data, "shared", [acc])
    weight_sh = s.cache_read(weight, "shared", [acc])
    data_reg = s.cache_read(data_sh, "local", [acc])
    weight_reg = s.cache_read(weight_sh, "local", [acc])

    i, j = s[out].op.axis
    by, vy, ty, yi = cfg["tile_y"].apply(s, out, i)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, out, j)
    s[out].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (vy, "vthread"), (vx, "vthread"),
                    (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[out].bind(ax, te.thread_axis(tag))
    s[acc].compute_at(s[out], tx)

    ai, aj = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    ko, km, ki = cfg["tile_k"].apply(s, acc, ak)
    s[acc].reorder(ko, km, ki, ai, aj)
    for load in (data_sh, weight_sh):
        s[load].compute_at(s[acc], ko)
        if cfg["pad"].val:
            s[load].storage_align(s[load].op.axis[0], *_PAD)
        cooperative_fetch(s, load, [(cfg["tile_y"].size[2], "threadIdx.y"),
                                    (cfg["tile_x"].size[2], "threadIdx.x")],
                          vector=cfg["vec"].val)
        if cfg["double_buffer"].val:
            s[load].double_buffer()
    for reg in (data_reg, weight_reg):
        s[reg].compute_at(s[acc], km)

    unroll_pragmas(cfg, s[out], by)
    return s, [data, weight, out]


dense = autotvm.template("dense.cuda")(_dense)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    (m, k), n = call.inputs[0], call.out_shape[1]
    return [(m, k, n)]


strategy.register("nn.dense", GPU_KEYS, "dense.cuda", plevel=10,
                  when=lambda call: call.dtype == "float32", workloads=_workloads)
strategy.catalog(TemplateInfo("dense.cuda", "cuda", ("batch", "in_dim", "out_dim"),
                              (1, 512, 1000),
                              "out = data @ weight.T, shared-memory and register tiles",
                              target="cuda"))
