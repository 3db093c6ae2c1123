"""CUDA conv2d (NCHW, batch 1) AutoTVM template: the seed tutorial's search space.

Knobs, in definition order: ``tile_f``, ``tile_y``, ``tile_x`` (4-way splits: block, vthread,
thread, inner), ``tile_rc``, ``tile_ry``, ``tile_rx`` (3-way reduction splits),
``auto_unroll_max_step`` in {0, 512, 1500} and ``unroll_explicit`` in {0, 1}. The output tile of
a block is accumulated in registers (``local``); input and weight tiles are fetched
cooperatively into shared memory by all threads of the block at each outer reduction step.
Configs over the target's per-block limits are filtered out (:func:`prune_conv2d`); the
index space stays the tutorial's.

Registered as ``"tutorial/conv2d_no_batching"`` (the seed's name) and ``"conv2d_nchw.cuda"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import autotvm, te, topi
from templtune.autotvm import strategy
from templtune.autotvm.strategy import TemplateInfo

from .._strategy import CONV_PARAMS, GPU_KEYS, conv_nchw_args, is_conv
from ._common import (
    MAX_LOCAL_WORDS,
    BlockUsage,
    bind_tiles,
    cooperative_fetch,
    prune_over_limits,
    unroll_pragmas,
)

__all__ = ["MAX_LOCAL_WORDS", "conv2d_nchw", "conv2d_no_batching", "prune_conv2d"]


def prune_conv2d(cfg: Any, stride: tuple[int, int], padded_hw: tuple[int, int]) -> None:
    """Drop the configs over the target's per-block limits (:func:`prune_over_limits`).

    Threads per block are the product of the thread factors of ``tile_f/y/x``; shared memory
    holds one outer reduction step of the input tile (the block's output rows and columns
    widened by the kernel window) and of the weight tile; registers per thread are the
    accumulators and the two register tiles, times the virtual threads.
    """
    sh, sw = stride
    # NOTE: tile_rx splits ry and tile_ry splits rx (see _schedule)
    knobs = ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_rx", "tile_ry")

    def threads(f: Any, y: Any, x: Any) -> Any:
        return f[2] * y[2] * x[2]

    def usage(f: Any, y: Any, x: Any, rc: Any, ry: Any, rx: Any) -> BlockUsage:
        blk_f, blk_y, blk_x = f[1] * f[2] * f[3], y[1] * y[2] * y[3], x[1] * x[2] * x[3]
        rc_in, ry_in, rx_in = rc[1] * rc[2], ry[1] * ry[2], rx[1] * rx[2]
        h = np.minimum((blk_y - 1) * sh + ry_in, padded_hw[0])
        w = np.minimum((blk_x - 1) * sw + rx_in, padded_hw[1])
        acc = f[3] * y[3] * x[3]
        data = rc[2] * ((y[3] - 1) * sh + ry[2]) * ((x[3] - 1) * sw + rx[2])
        weight = f[3] * rc[2] * ry[2] * rx[2]
        return BlockUsage(threads(f, y, x), 4 * (rc_in * h * w + blk_f * rc_in * ry_in * rx_in),
                          f[1] * y[1] * x[1] * (acc + data + weight))

    prune_over_limits(cfg, knobs, usage, threads, thread_knobs=3)


def _schedule(cfg: Any, s: Any, conv: Any, stride: tuple[int, int] = (1, 1)) -> None:
    n, f, y, x = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])

    padded = s[conv].op.input_tensors[0]
    prune_conv2d(cfg, stride, (int(padded.shape[2]), int(padded.shape[3])))
    weight = s[conv].op.input_tensors[1]
    s[padded].compute_inline()

    out = conv
    acc = s.cache_write(conv, "local")
    data_sh = s.cache_read(padded, "shared", [acc])
    weight_sh = s.cache_read(weight, "shared", [acc])
    data_reg = s.cache_read(data_sh, "local", [acc])
    weight_reg = s.cache_read(weight_sh, "local", [acc])

    n, f, y, x = s[out].op.axis
    bf, vf, tf, fi = cfg["tile_f"].apply(s, out, f)
    by, vy, ty, yi = cfg["tile_y"].apply(s, out, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, out, x)
    kernel_scope = n  # pragmas on the outermost axis govern the whole kernel
    s[out].reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    bind_tiles(s[out], (bf, vf, tf), (by, vy, ty), (bx, vx, tx))
    s[acc].compute_at(s[out], tx)

    n, f, y, x = s[acc].op.axis
    rc, ry, rx = s[acc].op.reduce_axis
    rco, rcm, rci = cfg["tile_rc"].apply(s, acc, rc)
    # NOTE: the seed applies tile_rx to ry and tile_ry to rx; both knobs are identical, so
    # this keeps the seed's records (and its best configs) meaningful here.
    ryo, rym, ryi = cfg["tile_rx"].apply(s, acc, ry)
    rxo, rxm, rxi = cfg["tile_ry"].apply(s, acc, rx)
    s[acc].reorder(rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, n, f, y, x)

    s[data_sh].compute_at(s[acc], rxo)
    s[weight_sh].compute_at(s[acc], rxo)
    s[data_reg].compute_at(s[acc], rxm)
    s[weight_reg].compute_at(s[acc], rxm)

    for load in (data_sh, weight_sh):
        cooperative_fetch(s, load, [(cfg["tile_f"].size[2], "threadIdx.z"),
                                    (cfg["tile_y"].size[2], "threadIdx.y"),
                                    (cfg["tile_x"].size[2], "threadIdx.x")])

    unroll_pragmas(cfg, s[out], kernel_scope)


def _conv2d(N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int,
                       stride: Any, padding: Any) -> tuple[Any, list[Any]]:
    """The template body: ``(schedule, [data, kernel, conv])`` for the current config."""
    if N != 1:
        raise ValueError("this template handles batch size 1 only")
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    st = (stride, stride) if isinstance(stride, int) else tuple(int(v) for v in stride)
    _schedule(autotvm.get_config(), s, conv, (st[0], st[1]))
    return s, [data, kernel, conv]


# NOTE: the public name is the registered wrapper, so that calling it under
# ``apply_history_best`` looks up this workload's best record (as in the tutorial).
conv2d_no_batching = autotvm.template("tutorial/conv2d_no_batching")(_conv2d)
conv2d_nchw = autotvm.template("conv2d_nchw.cuda")(_conv2d)


# ---- strategy and catalogue ---------------------------------------------------------------------
strategy.register("nn.conv2d", GPU_KEYS, "conv2d_nchw.cuda", plevel=10,
                  when=lambda call: is_conv(call, "NCHW") and call.inputs[0][0] == 1,
                  workloads=lambda call: [conv_nchw_args(call)])
strategy.catalog(TemplateInfo("conv2d_nchw.cuda", "cuda", CONV_PARAMS,
                              (1, 7, 7, 512, 512, 3, 3, 1, 1),
                              "direct conv2d, NCHW, batch 1 (the seed tutorial's space)",
                              target="cuda"))
