"""Schedule pieces shared by the CUDA templates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune import target as _target
from templtune import te

__all__ = ["MAX_LOCAL_WORDS", "BlockLimits", "BlockUsage", "KnobFilter", "bind_tiles",
           "block_limits", "cooperative_fetch", "prune_over_limits", "unroll_pragmas"]

#: local words per thread the CUDA backend builds at most (its ``max_local_words_per_thread``)
MAX_LOCAL_WORDS = 1024


@dataclass(frozen=True)
class KnobFilter:
    """A ``multi_filter`` on the factors of some split knobs: ``keep(*sizes)`` gets, per knob
    of ``knobs``, the tuple of its split factors (``entity.size``; ``(entity.val,)`` for a
    ``define_knob`` knob of ints), and must work when the factors are numpy arrays too:
    :meth:`table` evaluates it over all the knobs' entities at once, so the space is sized
    without a Python call per point."""

    knobs: tuple[str, ...]
    keep: Callable[..., Any]

    def __call__(self, entities: Any) -> bool:
        return bool(self.keep(*(_values(entities[k]) for k in self.knobs)))

    def table(self, *spaces: Any) -> np.ndarray:
        n = len(spaces)
        args = []
        for i, space in enumerate(spaces):
            sizes = np.array([_values(space[j]) for j in range(len(space))], dtype=np.int64)
            shape = [-1 if d == i else 1 for d in range(n)]
            args.append(tuple(sizes[:, c].reshape(shape) for c in range(sizes.shape[1])))
        return np.broadcast_to(self.keep(*args), [len(s) for s in spaces])


@dataclass(frozen=True, slots=True)
class BlockLimits:
    """The per-block limits of the current target that a template's space is pruned to."""

    threads: int
    shared_bytes: int
    registers: int
    local_words: int = MAX_LOCAL_WORDS


@dataclass(frozen=True, slots=True)
class BlockUsage:
    """What one config's kernel needs per block (ints, or numpy arrays over many configs):
    ``threads`` per block, ``shared_bytes``, and ``local_words`` per thread (registers for
    the local arrays, virtual threads included)."""

    threads: Any
    shared_bytes: Any
    local_words: Any

    def fits(self, lim: BlockLimits) -> Any:
        return ((self.threads <= lim.threads) & (self.shared_bytes <= lim.shared_bytes)
                & (self.local_words <= lim.local_words)
                & (self.local_words * self.threads <= lim.registers))


def block_limits() -> BlockLimits | None:
    """The limits of the target in scope (its capability record); None for a CPU target."""
    caps = _target.capabilities(None)
    if not (caps.max_threads_per_block and caps.max_shared_memory_per_block
            and caps.max_registers_per_block):
        return None
    return BlockLimits(caps.max_threads_per_block, caps.max_shared_memory_per_block,
                       caps.max_registers_per_block)


def prune_over_limits(cfg: Any, knobs: Sequence[str], usage: Callable[..., BlockUsage],
                      threads: Callable[..., Any] | None = None, thread_knobs: int = 0
                      ) -> None:
    """Drop the configs whose kernel exceeds the target's per-block limits, so that no trial
    is spent on an ``INSTANTIATION_ERROR``; a no-op on a CPU target.

    ``usage(*sizes)`` gets the split factors of each knob of ``knobs`` (as :class:`KnobFilter`
    does) and returns the :class:`BlockUsage`; it must work on numpy arrays. ``threads``, when
    given, computes the threads per block from the first ``thread_knobs`` knobs alone: a cheap
    first filter on them sizes the space without tabulating the over-threaded combinations of
    the other knobs.
    """
    lim = block_limits()
    if lim is None:
        return
    knobs = tuple(knobs)
    if threads is not None and thread_knobs:
        head = knobs[:thread_knobs]
        cfg.multi_filter(KnobFilter(head, lambda *sizes: threads(*sizes) <= lim.threads),
                         knobs=head)
    cfg.multi_filter(KnobFilter(knobs, lambda *sizes: usage(*sizes).fits(lim)), knobs=knobs)


def _values(entity: Any) -> tuple[int, ...]:
    size = getattr(entity, "size", None)
    return tuple(int(v) for v in (size if size is not None else (entity.val,)))


def cooperative_fetch(s: Any, load: Any, parts: Sequence[tuple[Any, str]],
                      vector: int = 1) -> None:
    """Spread the copy ``load`` (a shared-memory stage) over a block's threads: fuse its axes,
    split off one outer loop per ``(nparts, thread tag)`` of ``parts`` (outermost first) and
    bind each to its thread axis. ``vector`` > 1 makes each thread copy that many consecutive
    elements as one vector (``float2``/``float4`` where the addresses are aligned)."""
    fused = s[load].fuse(*s[load].op.axis)
    if vector > 1:
        fused, vec = s[load].split(fused, factor=vector)
        s[load].vectorize(vec)
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
