"""CUDA depthwise conv2d (NCHW, one filter per channel) AutoTVM template, registered as
``"depthwise_conv2d_nchw.cuda"`` and as the ``nn.conv2d`` strategy of depthwise layers.

Knobs: ``tile_c`` / ``tile_y`` / ``tile_x`` (3-way splits of channels, rows and columns:
block, thread, inner outputs per thread), ``auto_unroll_max_step`` in {0, 256, 1500} and
``unroll_explicit`` in {0, 1}. The padding is inlined (a depthwise window is short and every
input element is read by few outputs, so a shared-memory tile would save little); each thread
accumulates its outputs in registers. Configurations over the target's threads per block are
filtered out of the space; the fallback uses up to 256 threads.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te, topi
from templtune import target as _target
from templtune.autotvm import strategy
from templtune.autotvm.strategy import OpCall, TemplateInfo

from .._strategy import GPU_KEYS, conv_nchw_args, is_conv
from ._common import KnobFilter, unroll_pragmas

_MAX_THREAD_Z = 64  # CUDA's limit on blockDim.z


def _depthwise(N: int, H: int, W: int, C: int, KH: int, KW: int, stride: Any = 1,
               padding: Any = 0, dtype: str = "float32") -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, out])`` for the current config."""
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    kernel = te.placeholder((C, 1, KH, KW), name="kernel", dtype=dtype)
    out = topi.nn.depthwise_conv2d_nchw(data, kernel, stride, padding)
    s = te.create_schedule([out.op])
    cfg = autotvm.get_config()

    n, c, h, w = s[out].op.axis
    cfg.define_split("tile_c", c, num_outputs=3, filter=lambda e: e.size[1] <= _MAX_THREAD_Z)
    cfg.define_split("tile_y", h, num_outputs=3)
    cfg.define_split("tile_x", w, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 256, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    max_threads = _target.capabilities(None).max_threads_per_block
    if max_threads:
        cfg.multi_filter(KnobFilter(("tile_c", "tile_y", "tile_x"),
                                    lambda f, y, x: f[1] * y[1] * x[1] <= max_threads),
                         knobs=("tile_c", "tile_y", "tile_x"))
    if cfg.is_fallback:
        cfg.fallback_split("tile_c", [-1, 4, 1])
        cfg.fallback_split("tile_y", [-1, 4, 1])
        cfg.fallback_split("tile_x", [-1, 16, 1])

    s[out.op.input_tensors[0]].compute_inline()  # the padded input
    acc = s.cache_write(out, "local")
    n, c, h, w = s[out].op.axis
    bc, tc, ci = cfg["tile_c"].apply(s, out, c)
    by, ty, yi = cfg["tile_y"].apply(s, out, h)
    bx, tx, xi = cfg["tile_x"].apply(s, out, w)
    bz = s[out].fuse(n, bc)
    s[out].reorder(bz, by, bx, tc, ty, tx, ci, yi, xi)
    for ax, tag in ((bz, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                    (tc, "threadIdx.z"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[out].bind(ax, te.thread_axis(tag))
    s[acc].compute_at(s[out], tx)
    ry, rx = s[acc].op.reduce_axis
    an, ac, ah, aw = s[acc].op.axis
    s[acc].reorder(ry, rx, ac, ah, aw)
    unroll_pragmas(cfg, s[out], bz)
    return s, [data, kernel, out]


depthwise_conv2d_nchw = autotvm.template("depthwise_conv2d_nchw.cuda")(_depthwise)


# ---- strategy and catalogue ---------------------------------------------------------------------
def _workloads(call: OpCall) -> list[tuple[Any, ...]]:
    n, h, w, co, ci, kh, kw, stride, pad = conv_nchw_args(call)
    if co != ci:  # a channel multiplier above 1
        return []
    return [(n, h, w, co, kh, kw, stride, pad)]


strategy.register("nn.conv2d", GPU_KEYS, "depthwise_conv2d_nchw.cuda", plevel=10,
                  when=lambda call: is_conv(call, "NCHW", depthwise=True), workloads=_workloads)
strategy.catalog(TemplateInfo(
    "depthwise_conv2d_nchw.cuda", "cuda", ("N", "H", "W", "C", "KH", "KW", "stride", "padding"),
    (1, 56, 56, 128, 3, 3, 1, 1), "depthwise conv2d, NCHW, [C, 1, KH, KW]", target="cuda"))
