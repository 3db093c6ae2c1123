"""CUDA dense (``data @ weight.T``) AutoTVM template, registered as ``"dense.cuda"``.

Knobs: ``tile_y`` / ``tile_x`` (3-way splits of the batch and output axes: block, thread,
inner), ``tile_k`` (2-way reduction split: the outer steps fetch one k-slice of both operands
into shared memory cooperatively), ``auto_unroll_max_step`` in {0, 64, 512} and
``unroll_explicit`` in {0, 1}.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te, topi
from templtune.autotvm import strategy
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import GPU_KEYS
from ._common import cooperative_fetch, unroll_pragmas


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
    cfg.define_split("tile_y", i, num_outputs=3)
    cfg.define_split("tile_x", j, num_outputs=3)
    cfg.define_split("tile_k", k, num_outputs=2)
    cfg.define_knob("auto_unroll_max_step", [0, 64, 512])
    cfg.define_knob("unroll_explicit", [0, 1])

    acc = s.cache_write(out, "local")
    data_sh = s.cache_read(data, "shared", [acc])
    weight_sh = s.cache_read(weight, "shared", [acc])

    i, j = s[out].op.axis
    by, ty, yi = cfg["tile_y"].apply(s, out, i)
    bx, tx, xi = cfg["tile_x"].apply(s, out, j)
    s[out].reorder(by, bx, ty, tx, yi, xi)
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    s[out].bind(ty, te.thread_axis("threadIdx.y"))
    s[out].bind(tx, te.thread_axis("threadIdx.x"))
    s[acc].compute_at(s[out], tx)

    ai, aj = s[acc].op.axis
    (ak,) = s[acc].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, acc, ak)
    s[acc].reorder(ko, ki, ai, aj)
    for load in (data_sh, weight_sh):
        s[load].compute_at(s[acc], ko)
        cooperative_fetch(s, load, [(cfg["tile_y"].size[1], "threadIdx.y"),
                                    (cfg["tile_x"].size[1], "threadIdx.x")])

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
                              (1, 512, 1000), "out = data @ weight.T, shared-memory tiles",
                              target="cuda"))
