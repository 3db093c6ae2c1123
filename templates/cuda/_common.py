"""Schedule pieces shared by the CUDA templates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune import te

__all__ = ["KnobFilter", "bind_tiles", "cooperative_fetch", "unroll_pragmas"]


@dataclass(frozen=True)
class KnobFilter:
    """A ``multi_filter`` on the factors of some split knobs: ``keep(*sizes)`` gets, per knob
    of ``knobs``, the tuple of its split factors (``entity.size``), and must work when the
    factors are numpy arrays too: :meth:`table` evaluates it over all the knobs' entities at
    once, so the space is sized without a Python call per point."""

    knobs: tuple[str, ...]
    keep: Callable[..., Any]

    def __call__(self, entities: Any) -> bool:
        return bool(self.keep(*(tuple(int(v) for v in entities[k].size) for k in self.knobs)))

    def table(self, *spaces: Any) -> np.ndarray:
        n = len(spaces)
        args = []
        for i, space in enumerate(spaces):
            sizes = np.array([[int(v) for v in space[j].size] for j in range(len(space))],
                             dtype=np.int64)
            shape = [-1 if d == i else 1 for d in range(n)]
            args.append(tuple(sizes[:, c].reshape(shape) for c in range(sizes.shape[1])))
        return np.broadcast_to(self.keep(*args), [len(s) for s in spaces])


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
