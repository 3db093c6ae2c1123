"""Storage sharing for a network's intermediate buffers (TVM's graph memory planning).

A built network runs its kernel calls in one fixed order, so each intermediate value is live
from the call that writes it to the last call that reads it. :func:`plan_storage` gives every
value a storage block such that values live at the same time never share one: a call's output
takes a block freed by earlier calls (the smallest that fits, else the largest free one, grown),
and the values a call reads last are freed only after it, so no call writes over its own
inputs, except one it declares safe to overwrite (:attr:`Use.inplace`: a residual that the
call reads element by element where it writes) when that is the input's last use. Reusing blocks keeps the working set of activations small: each layer writes into memory
the layers before it just touched (still in cache) instead of a buffer of its own that last saw
the cache one inference earlier.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune.runtime.aligned import ALIGN, aligned_bytes, view

__all__ = ["StoragePlan", "Use", "View", "allocate", "pack_constants", "plan_storage", "step_uses",
           "value_bytes", "view_roots"]



@dataclass(frozen=True, slots=True)
class Use:
    """One kernel call for the planner: the values it reads and the value it writes.

    Attributes
    ----------
    reads : tuple of int
        Keys of the intermediate values the call reads (constants and network inputs left out).
    writes : int
        Key of the value it writes.
    nbytes : int
        Size of that value.
    inplace : tuple of int
        Values among ``reads`` the call may write its output over: it reads each element of
        one only to compute the output element at the same place (a fused residual add).
    """

    reads: tuple[int, ...]
    writes: int
    nbytes: int
    inplace: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StoragePlan:
    """Which block holds each value, and each block's size.

    Attributes
    ----------
    block_of : dict of int to int
        Value key -> index of its storage block.
    sizes : tuple of int
        Bytes of each block (a multiple of :data:`ALIGN`).
    """

    block_of: dict[int, int]
    sizes: tuple[int, ...]

    @property
    def total(self) -> int:
        """Bytes of all blocks together."""
        return sum(self.sizes)


def value_bytes(e: Any) -> int:
    """Bytes of a graph value (anything with a ``shape`` and a ``dtype``)."""
    return int(np.prod(e.shape, dtype=np.int64)) * np.dtype(e.dtype).itemsize


@dataclass(frozen=True, slots=True)
class View:
    """The kernel of a step that runs none: its output is its one input's memory in another
    shape (a reshape of a value an earlier step wrote), planned into the input's block."""

    shape: tuple[int, ...]


def view_roots(steps: Sequence[Any]) -> dict[int, int]:
    """Each :class:`View` step's output -> the value whose block it shares (a view of a view
    shares the first one's)."""
    roots: dict[int, int] = {}
    for step in steps:
        if isinstance(step.kernel, View):
            src = id(step.inputs[0])
            roots[id(step.output)] = roots.get(src, src)
    return roots


def step_uses(steps: Sequence[Any], inplace: bool = True) -> list[Use]:
    """The planner's view of a network's kernel calls (``graph.build.Step``: ``inputs``,
    ``output``, ``inplace``): the values each reads that an earlier call wrote (constants and
    network inputs left out), and, with ``inplace``, those it may write its output over.
    :class:`View` steps are no calls: a read of a view reads the value it shares a block with
    (:func:`view_roots`), which so stays live as long as the view is read."""
    produced = {id(step.output) for step in steps}
    roots = view_roots(steps)

    def made(es: Any) -> tuple[int, ...]:
        return tuple(roots.get(id(e), id(e)) for e in es
                     if not isinstance(e, np.ndarray) and id(e) in produced)

    return [Use(made(step.inputs), id(step.output), value_bytes(step.output),
                made(step.inputs[p] for p in step.inplace) if inplace else ())
            for step in steps if not isinstance(step.kernel, View)]


def _round(nbytes: int) -> int:
    return max(ALIGN, -(-nbytes // ALIGN) * ALIGN)


def plan_storage(uses: Sequence[Use], keep: frozenset[int] = frozenset()) -> StoragePlan:
    """Assign storage blocks to the values the calls ``uses`` write, in call order.

    Values in ``keep`` (the network's outputs) get blocks of their own that are never reused.
    A value no later call reads is freed right after the call that writes it.

    Raises
    ------
    ValueError
        If a value is written twice, or read before any call writes it.
    """
    last: dict[int, int] = {}
    written: set[int] = set()
    for i, u in enumerate(uses):
        for r in u.reads:
            if r not in written:
                raise ValueError(f"call {i} reads value {r} before any call writes it")
            last[r] = i
        if u.writes in written:
            raise ValueError(f"call {i} writes value {u.writes}, which call "
                             f"{next(j for j, v in enumerate(uses) if v.writes == u.writes)} "
                             "already wrote")
        written.add(u.writes)
        last.setdefault(u.writes, i)
    sizes: list[int] = []
    block_of: dict[int, int] = {}
    # free blocks as a sorted list of (size, block index)
    free: list[tuple[int, int]] = []
    for i, u in enumerate(uses):
        need = _round(u.nbytes)
        over = [r for r in u.inplace if last[r] == i and r not in keep
                and u.reads.count(r) == 1 and sizes[block_of[r]] >= need]
        if u.writes in keep:
            block = len(sizes)
            sizes.append(need)
        elif over:
            block = block_of[over[0]]
        elif free:
            j = bisect.bisect_left(free, (need, -1))
            # NOTE: the smallest block that fits; failing that, the largest free one grows
            # (a block grows only while it is free: its size is fixed before allocation)
            _, block = free.pop(j if j < len(free) else len(free) - 1)
            sizes[block] = max(sizes[block], need)
        else:
            block = len(sizes)
            sizes.append(need)
        block_of[u.writes] = block
        freed = {block_of[r] for r in u.reads if last[r] == i and r not in keep}
        if last[u.writes] == i and u.writes not in keep:
            freed.add(block)
        else:
            freed.discard(block)  # an input it wrote over now holds the live output
        for b in sorted(freed):
            bisect.insort(free, (sizes[b], b))
    return StoragePlan(block_of, tuple(sizes))


def allocate(plan: StoragePlan) -> list[np.ndarray]:
    """One zeroed ``uint8`` view per block of ``plan``, side by side in one
    :data:`ALIGN`-byte aligned array."""
    return _side_by_side(plan.sizes)


def pack_constants(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copies of ``arrays`` side by side in one :data:`ALIGN`-byte aligned array, in the given
    order, each aligned; the same array given twice is copied once. Given in the order a
    network's kernels read them, its weights stream from memory as one aligned array."""
    unique = list({id(a): a for a in arrays}.values())
    copies = {}
    for a, block in zip(unique, _side_by_side([_round(a.nbytes) for a in unique])):
        copies[id(a)] = view(block, a.shape, a.dtype)
        copies[id(a)][...] = a
    return [copies[id(a)] for a in arrays]


def _side_by_side(sizes: Sequence[int]) -> list[np.ndarray]:
    # NOTE: numpy aligns its own allocations to 16 bytes only: a vector load from one may
    # straddle two cache lines
    mem, out, at = aligned_bytes(sum(sizes)), [], 0
    for size in sizes:
        out.append(mem[at:at + size])
        at += size
    return out
