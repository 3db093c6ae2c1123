"""CUDA direct conv2d, NHWC data / HWIO kernel / NHWC output: ``"conv2d_nhwc.cuda"``.

The layout of ``relay.testing`` networks built with ``layout="NHWC"`` and of models converted
to NHWC for the auto-scheduler. A block computes a run of output pixels of one output row
(``blockIdx.z`` over batch x rows, ``blockIdx.y`` over the row's runs) by a run of output
channels (``blockIdx.x``); the input channels are reduced ``step`` at a time, and at each
kernel tap the block copies that tap's input slice (its pixels x ``step`` channels) and weight
slice (``step`` x its channels) into shared memory, channels innermost (coalesced in NHWC and
HWIO). Each thread accumulates ``vthread_n x tile_n`` pixels by ``vthread_c x tile_c``
channels in registers.

Knobs (TVM's names): ``tile_n`` / ``num_thread_n`` / ``vthread_n`` tile the pixels of a row
(TVM's tile the batch, which leaves the threads idle at batch 1), ``tile_c`` /
``num_thread_c`` / ``vthread_c`` the output channels, ``step`` the input channels (its
candidates capped at ``CI``). Runs much longer than the row or the channel count are left out
(they only add idle threads), and so are configs over the target's per-block limits
(:func:`prune_nhwc`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import autotvm, te, topi
from templtune.autotvm import strategy
from templtune.autotvm.strategy import TemplateInfo

from .._strategy import CONV_PARAMS, GPU_KEYS, conv_nhwc_args, is_conv
from ._common import BlockUsage, KnobFilter, prune_over_limits

__all__ = ["conv2d_nhwc", "prune_nhwc"]

TILE_N, TILE_C = [1, 2, 4, 8], [1, 2, 4, 8]
THREADS_N, THREADS_C = [4, 8, 16], [4, 8, 16]
VTHREADS = [1, 2]
STEPS = [16, 3, 32, 64]
_KNOBS = ("tile_n", "num_thread_n", "vthread_n", "tile_c", "num_thread_c", "vthread_c", "step")


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _other(v: int) -> Any:
    from templtune.autotvm.task.space import OtherOptionEntity

    return OtherOptionEntity(v)


def prune_nhwc(cfg: Any, ow: int, co: int, stride_w: int, padded_w: int) -> None:
    """Drop the configs whose pixel run is over twice the output row ``ow`` or whose channel
    run is over ``co`` (beyond the smallest run: idle threads only), then those over the
    target's per-block limits (:func:`prune_over_limits`): threads are ``num_thread_n x
    num_thread_c``; shared memory holds one tap's input slice (the run's pixels ``stride_w``
    apart, within the padded row) and weight slice, ``step`` channels deep; registers per
    thread are the accumulators and one input channel's register copies of both operands."""
    least_n, least_c = TILE_N[0] * THREADS_N[0], TILE_C[0] * THREADS_C[0]

    def waste(tn: Any, thn: Any, vn: Any, tc: Any, thc: Any, vc: Any) -> Any:
        run_n, run_c = tn[0] * thn[0] * vn[0], tc[0] * thc[0] * vc[0]
        return ((run_n <= max(2 * ow, least_n)) & (run_c <= max(co, least_c)))

    head = _KNOBS[:6]
    cfg.multi_filter(KnobFilter(head, waste), knobs=head)

    def threads(tn: Any, thn: Any, vn: Any, tc: Any, thc: Any) -> Any:
        return thn[0] * thc[0]

    def usage(tn: Any, thn: Any, vn: Any, tc: Any, thc: Any, vc: Any, st: Any) -> BlockUsage:
        run_n, run_c = tn[0] * thn[0] * vn[0], tc[0] * thc[0] * vc[0]
        width = np.minimum((run_n - 1) * stride_w + 1, padded_w)
        shared = 4 * st[0] * (width + run_c)
        words = vn[0] * vc[0] * (tn[0] * tc[0] + tn[0] + tc[0])
        return BlockUsage(threads(tn, thn, vn, tc, thc), shared, words)

    prune_over_limits(cfg, _KNOBS, usage, threads, thread_knobs=5)


def _define(cfg: Any, ow: int, co: int, ci: int, stride_w: int, padded_w: int) -> None:
    cfg.define_knob("tile_n", TILE_N)
    cfg.define_knob("num_thread_n", THREADS_N)
    cfg.define_knob("vthread_n", VTHREADS)
    cfg.define_knob("tile_c", TILE_C)
    cfg.define_knob("num_thread_c", THREADS_C)
    cfg.define_knob("vthread_c", VTHREADS)
    cfg.define_knob("step", list(dict.fromkeys(min(v, ci) for v in STEPS)))
    prune_nhwc(cfg, ow, co, stride_w, padded_w)
    if cfg.is_fallback:
        # 16 x 8 threads, 2 x 4 outputs each (fewer along a short row or few channels)
        thn = 8 if ow >= 16 else 4
        tc = 4 if co >= 64 else 1
        for name, v in (("tile_n", 2 if ow >= 16 else 1), ("num_thread_n", thn),
                        ("vthread_n", 1), ("tile_c", tc), ("num_thread_c", 16 if co >= 16 else 4),
                        ("vthread_c", 1), ("step", min(16, ci))):
            cfg[name] = _other(v)


def _split3(s: Any, stage: Any, ax: Any, inner: int, threads: int, vthreads: int
            ) -> tuple[Any, Any, Any, Any]:
    """``ax`` as ``(block, vthread, thread, inner)`` loops of the given inner extents."""
    rest, i = s[stage].split(ax, factor=inner)
    rest, t = s[stage].split(rest, factor=threads)
    b, v = s[stage].split(rest, factor=vthreads)
    return b, v, t, i


def _coalesced_fetch(s: Any, load: Any, threads_y: int, threads_x: int) -> None:
    """Copy the shared-memory stage ``load`` with consecutive ``threadIdx.x`` on consecutive
    elements (channels innermost: coalesced reads of NHWC data and HWIO weights), the
    ``threadIdx.y`` rows next, each thread repeating the pattern over the rest."""
    fused = s[load].fuse(*s[load].op.axis)
    rest, tx = s[load].split(fused, factor=threads_x)
    _, ty = s[load].split(rest, factor=threads_y)
    s[load].bind(tx, te.thread_axis("threadIdx.x"))
    s[load].bind(ty, te.thread_axis("threadIdx.y"))


def _conv2d_nhwc(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: Any,
                padding: Any) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, output])`` for the current config;
    ``data`` is ``[N, H, W, CI]``, ``kernel`` HWIO ``[KH, KW, CI, CO]``."""
    data = te.placeholder((N, H, W, CI), name="data")
    kernel = te.placeholder((KH, KW, CI, CO), name="kernel")
    conv = topi.nn.conv2d_nhwc(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    padded = s[conv].op.input_tensors[0]
    _, oh, ow, _ = (int(v) for v in conv.shape)
    sw = _pair(stride)[1]
    cfg = autotvm.get_config()
    _define(cfg, ow, CO, CI, sw, int(padded.shape[2]))
    cfg.add_flop(2.0 * N * oh * ow * CO * CI * KH * KW)
    tn, thn, vn = (cfg[k].val for k in ("tile_n", "num_thread_n", "vthread_n"))
    tc, thc, vc = (cfg[k].val for k in ("tile_c", "num_thread_c", "vthread_c"))

    s[padded].compute_inline()
    acc = s.cache_write(conv, "local")
    data_sh = s.cache_read(padded, "shared", [acc])
    weight_sh = s.cache_read(kernel, "shared", [acc])
    data_reg = s.cache_read(data_sh, "local", [acc])
    weight_reg = s.cache_read(weight_sh, "local", [acc])

    n, y, x, f = s[conv].op.axis
    bz = s[conv].fuse(n, y)
    by, vy, ty, xi = _split3(s, conv, x, tn, thn, vn)
    bx, vx, tx, fi = _split3(s, conv, f, tc, thc, vc)
    s[conv].reorder(bz, by, bx, vy, vx, ty, tx, xi, fi)
    for ax, tag in ((bz, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                    (vy, "vthread"), (vx, "vthread"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        s[conv].bind(ax, te.thread_axis(tag))
    s[acc].compute_at(s[conv], tx)

    _, _, ax_x, ax_f = s[acc].op.axis
    ry, rx, rc = s[acc].op.reduce_axis
    rco, rci = s[acc].split(rc, factor=cfg["step"].val)
    s[acc].reorder(rco, ry, rx, rci, ax_x, ax_f)
    for load in (data_sh, weight_sh):
        s[load].compute_at(s[acc], rx)
        _coalesced_fetch(s, load, thn, thc)
    for reg in (data_reg, weight_reg):
        s[reg].compute_at(s[acc], rci)
    return s, [data, kernel, conv]


conv2d_nhwc = autotvm.template("conv2d_nhwc.cuda")(_conv2d_nhwc)


# ---- strategy and catalogue ---------------------------------------------------------------------
strategy.register("nn.conv2d", GPU_KEYS, "conv2d_nhwc.cuda", plevel=10,
                  when=lambda call: is_conv(call, "NHWC"), workloads=lambda call: [conv_nhwc_args(call)])
strategy.catalog(TemplateInfo("conv2d_nhwc.cuda", "cuda", CONV_PARAMS,
                              (1, 56, 56, 64, 64, 3, 3, 1, 1),
                              "direct conv2d, NHWC data / HWIO kernel, any batch",
                              target="cuda"))
