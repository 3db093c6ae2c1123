"""Schedule pieces shared by the CUDA templates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from templtune import te

__all__ = ["bind_tiles", "cooperative_fetch", "unroll_pragmas"]


def cooperative_fetch(s: Any, load: Any, parts: Sequence[tuple[Any, str]]) -> None:
    """Spread the copy ``load`` (a shared-memory stage) over a block's threads: fuse its axes,
    split off one outer loop per ``(nparts, thread tag)`` of ``parts`` (outermost first) and
    bind each to its thread axis."""
    fused = s[load].fuse(*s[load].op.axis)
    outer = []
    for nparts, _ in parts:
        ax, fused = s[load].split(fused, nparts=nparts)
        outer.append(ax)
    for ax, (_, tag) in zip(outer, parts):
        s[load].bind(ax, te.thread_axis(tag))


def unroll_pragmas(cfg: Any, stage: Any, axis: Any) -> None:
    """The ``auto_unroll_max_step`` and ``unroll_explicit`` knobs as pragmas on ``axis``."""
    stage.pragma(axis, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    stage.pragma(axis, "unroll_explicit", cfg["unroll_explicit"].val)


_TILE_TAGS = (("blockIdx.z", "blockIdx.y", "blockIdx.x"), ("vthread",) * 3,
              ("threadIdx.z", "threadIdx.y", "threadIdx.x"))


def bind_tiles(stage: Any, z: Sequence[Any], y: Sequence[Any], x: Sequence[Any]) -> None:
    """Bind the (block, vthread, thread) loops of three 4-way splits (``z``, ``y``, ``x``,
    each at least the first three loops of the split): blocks, then virtual threads, then
    threads, each level z-y-x."""
    for level, tags in enumerate(_TILE_TAGS):
        for axes, tag in zip((z, y, x), tags):
            stage.bind(axes[level], te.thread_axis(tag))
