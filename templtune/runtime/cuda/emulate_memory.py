"""The lanes and memory of one emulated CUDA launch, with the race detector.

:class:`_LaunchMemory` maps a chunk of blocks to numpy lanes (thread and block indices), owns
the shared and local allocations and performs every load, store and barrier with the race and
bounds checks that :mod:`templtune.runtime.cuda.emulate` describes. It is the memory model
only; evaluating loop IR over it is :class:`templtune.runtime.cuda.emulate._Launch`, kept apart
so each half can be read on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import buffer_size
from templtune.codegen.cuda.kernel import Kernel
from templtune.errors import TempltuneError
from templtune.lower.ir import Buffer
from templtune.te.expr import Var


class EmulationError(TempltuneError):
    """The emulated kernel did something undefined: out-of-bounds access, unbound variable."""


class RaceError(EmulationError):
    """A data race or a barrier in divergent code (e.g. a missing ``__syncthreads``)."""


def _ndt(dtype: str) -> np.dtype:
    return dt.to_numpy(dt.element_of(dtype))


def _other_block_settled(w: np.ndarray, my_block: Any) -> np.ndarray:
    """Global elements written before a barrier by a block other than ``my_block``."""
    return (w <= -2) & (-2 - w != my_block)


class _Mem:
    """One buffer's storage plus race bookkeeping; ``scope`` picks how lanes map to regions."""

    def __init__(self, buf: Buffer, flat: np.ndarray, scope: str, region: int) -> None:
        self.buf, self.flat, self.scope, self.region = buf, flat, scope, region
        self.writer = np.full(flat.size, -1, np.int64)
        self.reader = np.full(flat.size, -1, np.int64) if scope == "shared" else None


class _LaunchMemory:
    """The lanes of a chunk of blocks and the memory they share, with race bookkeeping."""

    def __init__(self, k: Kernel, mems: dict[Buffer, _Mem], blocks: np.ndarray,
                 check: bool) -> None:
        self.k, self.check = k, check
        nt = k.threads_per_block
        self.nt = nt
        nb = blocks.size
        self.n = nb * nt
        lane = np.arange(self.n, dtype=np.int64)
        self.tid = lane % nt                       # thread id within its block
        self.blk_local = lane // nt                # block index within this chunk
        self.blk = blocks[self.blk_local]          # global linear block id
        self.gid = self.blk * nt + self.tid        # global thread id
        bx, by, _ = k.block
        gx, gy, _ = k.grid
        coords = {
            "threadIdx.x": self.tid % bx, "threadIdx.y": (self.tid // bx) % by,
            "threadIdx.z": self.tid // (bx * by), "blockIdx.x": self.blk % gx,
            "blockIdx.y": (self.blk // gx) % gy, "blockIdx.z": self.blk // (gx * gy),
        }
        self.env: dict[Var, Any] = {v: coords[t] for t, v in k.thread_vars}
        self.mems = dict(mems)
        self.dirty: set[_Mem] = set()
        for b in k.allocs:
            size = buffer_size(b)
            count = nb if b.scope == "shared" else self.n
            fill = np.nan if dt.is_float(b.dtype) else 0
            flat = np.full(count * size, fill, dtype=_ndt(b.dtype))
            self.mems[b] = _Mem(b, flat, b.scope, size)

    # ------------------------------------------------------------------ memory helpers
    def _offset(self, m: _Mem) -> Any:
        if m.scope == "shared":
            return self.blk_local * m.region
        if m.scope == "local":
            return np.arange(self.n, dtype=np.int64) * m.region
        return 0

    def _active(self, mask: np.ndarray, lanes: int, pred: Any = None) -> np.ndarray:
        act = mask[:, None] if lanes > 1 else mask
        shape = (self.n, lanes) if lanes > 1 else (self.n,)
        act = np.broadcast_to(act, shape)
        if pred is not None:
            act = act & np.broadcast_to(np.asarray(pred, bool), shape)
        return act

    def _positions(self, m: _Mem, idx: Any, act: np.ndarray) -> np.ndarray:
        idx = np.broadcast_to(np.asarray(idx, dtype=np.int64), act.shape)
        size = m.region if m.scope != "global" else m.flat.size
        bad = act & ((idx < 0) | (idx >= size))
        if bad.any():
            lane = int(np.argwhere(bad)[0][0])
            raise EmulationError(
                f"{self.k.name}: out-of-bounds access {m.buf.name}[{int(idx[bad][0])}] (size "
                f"{size}) by {self._who(lane)}")
        off = self._offset(m)
        if not np.isscalar(off) and act.ndim == 2:
            off = off[:, None]
        return np.where(act, idx + off, 0)

    def _who(self, lane: int) -> str:
        b, t = int(self.blk[lane]), int(self.tid[lane])
        bx, by, _ = self.k.block
        gx, gy, _ = self.k.grid
        return (f"thread ({t % bx}, {(t // bx) % by}, {t // (bx * by)}) of block "
                f"({b % gx}, {(b // gx) % gy}, {b // (gx * gy)})")

    def _tids(self, m: _Mem, act: np.ndarray) -> np.ndarray:
        ids = self.tid if m.scope == "shared" else self.gid
        return np.broadcast_to(ids[:, None] if act.ndim == 2 else ids, act.shape)[act]

    def load(self, m: _Mem, idx: Any, act: np.ndarray) -> np.ndarray:
        pos = self._positions(m, idx, act)
        out = m.flat[pos]
        if self.check and m.scope in ("shared", "global") and act.any():
            p, me = pos[act], self._tids(m, act)
            w = m.writer[p]
            if m.scope == "shared":
                bad = (w >= 0) & (w != me)
            else:
                bad = ((w >= 0) & (w // self.nt != me // self.nt)) | _other_block_settled(
                    w, me // self.nt)
            self._race(bad, m, p, "read-after-write", lambda i: (
                f"written by thread {int(w[i])}, read by thread {int(me[i])} with no barrier "
                "in between (missing __syncthreads?)"))
            if m.reader is not None:
                prior = m.reader[p]
                multi = ((prior >= 0) & (prior != me)) | (prior == -2)
                m.reader[p] = me
                multi |= m.reader[p] != me
                m.reader[p[multi]] = -2
        return out

    def _elem(self, m: _Mem, p: int) -> int:
        return int(p % m.region) if m.scope == "shared" else int(p)

    def _race(self, bad: np.ndarray, m: _Mem, p: np.ndarray, kind: str,
              detail: Callable[[int], str]) -> None:
        """Raise :class:`RaceError` for the first access flagged in ``bad`` (``p``: the
        accesses' flat positions in ``m``); ``detail(i)`` describes access ``i``."""
        if bad.any():
            i = int(np.argmax(bad))
            raise RaceError(f"{self.k.name}: {kind} race on {m.buf.name}"
                            f"[{self._elem(m, p[i])}]: {detail(i)}")

    def store(self, m: _Mem, idx: Any, value: Any, act: np.ndarray) -> None:
        pos = self._positions(m, idx, act)
        if not act.any():
            return
        val = np.broadcast_to(np.asarray(value), act.shape)[act].astype(m.flat.dtype)
        p = pos[act]
        if self.check and m.scope in ("shared", "global"):
            me = self._tids(m, act)
            if m.reader is not None:
                r = m.reader[p]
                bad = ((r >= 0) & (r != me)) | (r == -2)
                self._race(bad, m, p, "write-after-read", lambda i: (
                    f"thread {int(me[i])} overwrites an element other threads read since the "
                    "last barrier (missing __syncthreads?)"))
            w = m.writer[p]
            old = m.flat[p]
            differ = ~((old == val) | (np.isnan(old) & np.isnan(val))
                       if m.flat.dtype.kind == "f" else old == val)
            clash = (w >= 0) & (w != me) & differ
            if m.scope == "global":
                clash |= _other_block_settled(w, me // self.nt) & differ
                self.dirty.add(m)
            m.flat[p] = val
            m.writer[p] = me
            same_step = m.writer[p] != me
            clash |= same_step & (m.flat[p] != val)
            self._race(clash, m, p, "write-write", lambda i: "threads write different values")
        else:
            m.flat[p] = val

    def barrier(self, mask: np.ndarray) -> None:
        per_block = mask.reshape(-1, self.nt)
        partial = per_block.any(axis=1) & ~per_block.all(axis=1)
        if partial.any():
            raise RaceError(f"{self.k.name}: __syncthreads() reached by only part of a block "
                            "(barrier in divergent code)")
        if not self.check:
            return
        active_blocks = per_block.all(axis=1)
        # NOTE: __syncthreads also orders global memory within a block: a write before it is
        # settled (writer -> -2 - block), so later accesses by other threads of the same block
        # are no race, while other blocks still see a foreign write.
        live = {int(b) for b in self.blk[::self.nt][active_blocks]}
        for m in self.dirty:
            w = m.writer
            pos = np.nonzero(w >= 0)[0]
            if pos.size:
                blk = w[pos] // self.nt
                sel = np.isin(blk, list(live))
                w[pos[sel]] = -2 - blk[sel]
        self.dirty = set()
        for m in self.mems.values():
            if m.scope == "shared" and m.reader is not None and m.writer is not None:
                rd = m.reader.reshape(-1, m.region)
                wr = m.writer.reshape(-1, m.region)
                rd[active_blocks] = -1
                wr[active_blocks] = -1

    def mem(self, b: Buffer) -> _Mem:
        try:
            return self.mems[b]
        except KeyError:
            raise EmulationError(f"{self.k.name}: buffer {b.name} is not bound") from None
