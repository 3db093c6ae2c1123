"""Run CUDA kernels (loop IR after the CUDA passes) on the CPU, with a race detector.

This is the semantic check for machines without a GPU. All threads of a chunk of blocks run in
lockstep as numpy lanes: thread indices are arrays, uniform loops are Python loops, divergent
``if``/loops run under a lane mask. Shared memory is one array per block, local arrays one per
thread, uninitialised floats are NaN (so reading one shows up in the result).

Lockstep hides races, so they are detected explicitly. Between two barriers of a block, every
shared element remembers which thread wrote it and which thread(s) read it; a read of an element
another thread wrote, or a write of an element another thread read, is a :class:`RaceError`
(a missing ``__syncthreads``), as is a write of a different value to an element another thread
wrote, a barrier reached by only part of a block, or a read of global memory written by another
block in the same launch. An access outside a buffer is an :class:`EmulationError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import buffer_size
from templtune.codegen.cuda.kernel import BLOCK_TAGS, THREAD_TAGS, Kernel, specialize
from templtune.codegen.cuda.sync import is_barrier
from templtune.errors import TempltuneError
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Broadcast,
    Buffer,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    SeqStmt,
    Stmt,
    Store,
)
from templtune.te.dispatch import Dispatch
from templtune.te.expr import BinOp, BinOpKind, Call, Cast, FloatImm, IntImm, Not, Select, Var

# NOTE: lanes per lockstep chunk; bounds memory (local arrays are lanes x size) while keeping
# numpy calls large enough to amortise the interpreter.
MAX_LANES = 1 << 15


class EmulationError(TempltuneError):
    """The emulated kernel did something undefined: out-of-bounds access, unbound variable."""


class RaceError(EmulationError):
    """A data race or a barrier in divergent code (e.g. a missing ``__syncthreads``)."""


_UNARY: dict[str, Callable[..., Any]] = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
          "log1p": np.log1p, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
          "tan": np.tan, "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
          "round": np.round, "trunc": np.trunc, "atan": np.arctan, "asin": np.arcsin,
          "acos": np.arccos, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}


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


class _Launch:
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
            if bad.any():
                i = int(np.argmax(bad))
                raise RaceError(
                    f"{self.k.name}: read-after-write race on {m.buf.name}[{self._elem(m, p[i])}]"
                    f": written by thread {int(w[i])}, read by thread {int(me[i])} with no "
                    "barrier in between (missing __syncthreads?)")
            if m.reader is not None:
                prior = m.reader[p]
                multi = ((prior >= 0) & (prior != me)) | (prior == -2)
                m.reader[p] = me
                multi |= m.reader[p] != me
                m.reader[p[multi]] = -2
        return out

    def _elem(self, m: _Mem, p: int) -> int:
        return int(p % m.region) if m.scope == "shared" else int(p)

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
                if bad.any():
                    i = int(np.argmax(bad))
                    raise RaceError(
                        f"{self.k.name}: write-after-read race on {m.buf.name}"
                        f"[{self._elem(m, p[i])}]: thread {int(me[i])} overwrites an element "
                        "other threads read since the last barrier (missing __syncthreads?)")
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
            if clash.any():
                i = int(np.argmax(clash))
                raise RaceError(f"{self.k.name}: write-write race on {m.buf.name}"
                                f"[{self._elem(m, p[i])}]: threads write different values")
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

    # ------------------------------------------------------------------ expressions
    def ev(self, e: Any, mask: np.ndarray) -> Any:
        return _EV(self, e, mask)

    def binop(self, e: BinOp, mask: np.ndarray) -> Any:
        a, b = self.ev(e.a, mask), self.ev(e.b, mask)
        op, is_f = e.op, dt.is_float(e.a.dtype)
        with np.errstate(all="ignore"):
            if op is BinOpKind.ADD:
                return a + b
            if op is BinOpKind.SUB:
                return a - b
            if op is BinOpKind.MUL:
                return a * b
            if op is BinOpKind.DIV:
                if is_f:
                    return a / b
                q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
                return np.where((np.asarray(a) < 0) != (np.asarray(b) < 0), -q, q)
            if op is BinOpKind.FLOORDIV:
                return np.floor(a / b) if is_f else a // np.where(b == 0, 1, b)
            if op is BinOpKind.FLOORMOD:
                return a - np.floor(a / b) * b if is_f else a % np.where(b == 0, 1, b)
            if op is BinOpKind.MIN:
                return np.minimum(a, b)
            if op is BinOpKind.MAX:
                return np.maximum(a, b)
            if op is BinOpKind.AND:
                return np.logical_and(a, b)
            if op is BinOpKind.OR:
                return np.logical_or(a, b)
            cmp = {BinOpKind.EQ: np.equal, BinOpKind.NE: np.not_equal, BinOpKind.LT: np.less,
                   BinOpKind.LE: np.less_equal, BinOpKind.GT: np.greater,
                   BinOpKind.GE: np.greater_equal}
            return cmp[op](a, b)

    def call(self, e: Call, mask: np.ndarray) -> Any:
        if e.name in ("likely", "unlikely"):
            return self.ev(e.args[0], mask)
        args = [self.ev(a, mask) for a in e.args]
        ty = _ndt(e.dtype).type if not dt.is_bool(e.dtype) else bool
        with np.errstate(all="ignore"):
            if e.name in _UNARY:
                return _UNARY[e.name](args[0])
            if e.name == "sigmoid":
                return ty(1) / (ty(1) + np.exp(-args[0]))
            if e.name == "rsqrt":
                return ty(1) / np.sqrt(args[0])
            if e.name == "pow":
                return np.power(args[0], args[1])
            if e.name in ("fmod",):
                return np.fmod(args[0], args[1])
            if e.name == "erf":
                return np.vectorize(math.erf, otypes=[_ndt(e.dtype)])(args[0])
        raise EmulationError(f"cannot emulate intrinsic {e.name!r}")

    def mem(self, b: Buffer) -> _Mem:
        try:
            return self.mems[b]
        except KeyError:
            raise EmulationError(f"{self.k.name}: buffer {b.name} is not bound") from None

    # ------------------------------------------------------------------ statements
    def run(self, s: Stmt, mask: np.ndarray) -> None:
        _RUN(self, s, mask)


# ---------------------------------------------------------------------- expression table
# Handlers: (launch, node, active-thread mask) -> per-thread numpy values.
_EV: Dispatch[Any] = Dispatch(
    "CUDA emulator expression",
    missing=lambda e: EmulationError(f"cannot emulate expression {type(e).__name__}"))


@_EV.register(IntImm)
def _int(r: _Launch, e: IntImm, mask: np.ndarray) -> Any:
    return np.bool_(e.value) if e.dtype == "bool" else np.int64(e.value)


@_EV.register(FloatImm)
def _float(r: _Launch, e: FloatImm, mask: np.ndarray) -> Any:
    return _ndt(e.dtype).type(e.value)


@_EV.register(Var)
def _var(r: _Launch, e: Var, mask: np.ndarray) -> Any:
    try:
        return r.env[e]
    except KeyError:
        raise EmulationError(f"{r.k.name}: unbound variable {e.name}") from None


@_EV.register(BinOp)
def _binop(r: _Launch, e: BinOp, mask: np.ndarray) -> Any:
    return r.binop(e, mask)


@_EV.register(Not)
def _not(r: _Launch, e: Not, mask: np.ndarray) -> Any:
    return np.logical_not(r.ev(e.a, mask))


@_EV.register(Cast)
def _cast(r: _Launch, e: Cast, mask: np.ndarray) -> Any:
    v = np.asarray(r.ev(e.value, mask))
    return v.astype(np.int64 if dt.is_int(e.dtype) else _ndt(e.dtype))


@_EV.register(Select)
def _select(r: _Launch, e: Select, mask: np.ndarray) -> Any:
    c = np.asarray(r.ev(e.cond, mask), dtype=bool)
    if e.guarded:
        cm = np.broadcast_to(c if c.ndim <= 1 else c.any(axis=-1), mask.shape)
        t = r.ev(e.true_value, mask & cm) if (mask & cm).any() else 0
        f = r.ev(e.false_value, mask & ~cm) if (mask & ~cm).any() else 0
        dtype = _ndt(e.dtype) if not dt.is_int(e.dtype) else np.int64
        return np.where(c, t, f).astype(dtype)
    return np.where(c, r.ev(e.true_value, mask), r.ev(e.false_value, mask))


@_EV.register(Call)
def _call(r: _Launch, e: Call, mask: np.ndarray) -> Any:
    return r.call(e, mask)


@_EV.register(Load)
def _load(r: _Launch, e: Load, mask: np.ndarray) -> Any:
    idx = r.ev(e.index, mask)
    lanes = dt.lanes(e.index.dtype)
    pred = None if e.predicate is None else r.ev(e.predicate, mask)
    act = r._active(mask, lanes, pred)
    out = r.load(r.mem(e.buffer), idx, act)
    return out if pred is None else np.where(act, out, 0).astype(out.dtype)


@_EV.register(Ramp)
def _ramp(r: _Launch, e: Ramp, mask: np.ndarray) -> Any:
    base = np.asarray(r.ev(e.base, mask))
    stride = r.ev(e.stride, mask)
    return base[..., None] + np.asarray(stride)[..., None] * np.arange(e.lanes)


@_EV.register(Broadcast)
def _broadcast(r: _Launch, e: Broadcast, mask: np.ndarray) -> Any:
    v = np.asarray(r.ev(e.value, mask))
    return np.repeat(v[..., None], e.lanes, axis=-1)


# ----------------------------------------------------------------------- statement table
_RUN: Dispatch[None] = Dispatch(
    "CUDA emulator statement",
    missing=lambda s: EmulationError(f"cannot emulate statement {type(s).__name__}"))


@_RUN.register(SeqStmt)
def _seq(r: _Launch, s: SeqStmt, mask: np.ndarray) -> None:
    for c in s.seq:
        r.run(c, mask)


@_RUN.register(Store)
def _store(r: _Launch, s: Store, mask: np.ndarray) -> None:
    idx = r.ev(s.index, mask)
    val = r.ev(s.value, mask)
    pred = None if s.predicate is None else r.ev(s.predicate, mask)
    r.store(r.mem(s.buffer), idx, val, r._active(mask, dt.lanes(s.index.dtype), pred))


@_RUN.register(For)
def _for(r: _Launch, s: For, mask: np.ndarray) -> None:
    mn, ext = r.ev(s.min, mask), r.ev(s.extent, mask)
    if np.ndim(mn) == 0 and np.ndim(ext) == 0:
        for i in range(int(mn), int(mn) + int(ext)):
            r.env[s.loop_var] = np.int64(i)
            r.run(s.body, mask)
    else:
        mn_a, end_a = np.broadcast_to(mn, mask.shape), np.broadcast_to(mn + ext, mask.shape)
        lo, hi = int(mn_a[mask].min(initial=0)), int(end_a[mask].max(initial=0))
        for i in range(lo, hi):
            m = mask & (mn_a <= i) & (i < end_a)
            if m.any():
                r.env[s.loop_var] = np.int64(i)
                r.run(s.body, m)
    r.env.pop(s.loop_var, None)


@_RUN.register(IfThenElse)
def _if(r: _Launch, s: IfThenElse, mask: np.ndarray) -> None:
    c = np.broadcast_to(np.asarray(r.ev(s.condition, mask), bool), mask.shape)
    if (mask & c).any():
        r.run(s.then_case, mask & c)
    if s.else_case is not None and (mask & ~c).any():
        r.run(s.else_case, mask & ~c)


@_RUN.register(LetStmt)
def _let(r: _Launch, s: LetStmt, mask: np.ndarray) -> None:
    r.env[s.var] = r.ev(s.value, mask)
    r.run(s.body, mask)
    r.env.pop(s.var, None)


@_RUN.register(AttrStmt)
def _attr(r: _Launch, s: AttrStmt, mask: np.ndarray) -> None:
    r.run(s.body, mask)


@_RUN.register(Allocate)
def _allocate(r: _Launch, s: Allocate, mask: np.ndarray) -> None:
    raise EmulationError(f"{r.k.name}: allocation {s.buffer.name} not hoisted")


@_RUN.register(Evaluate)
def _evaluate(r: _Launch, s: Evaluate, mask: np.ndarray) -> None:
    if is_barrier(s):
        r.barrier(mask)


def run_kernel(kernel: Kernel, buffers: dict[Buffer, np.ndarray], check_races: bool = True,
               max_lanes: int = MAX_LANES) -> None:
    """Execute one kernel on the CPU; ``buffers`` maps its global buffers to flat arrays
    (modified in place)."""
    mems = {b: _Mem(b, buffers[b], "global", buffers[b].size) for b in kernel.params}
    if not all(isinstance(g, int) for g in kernel.grid):
        raise EmulationError(f"{kernel.name}: symbolic launch {kernel.grid}; specialize() it "
                             f"to the shape variables' values first")
    n_blocks: int = math.prod(kernel.grid)  # type: ignore[arg-type]
    per_chunk = max(1, max_lanes // kernel.threads_per_block)
    for start in range(0, n_blocks, per_chunk):
        blocks = np.arange(start, min(n_blocks, start + per_chunk), dtype=np.int64)
        launch = _Launch(kernel, mems, blocks, check_races)
        launch.run(kernel.body, np.ones(launch.n, dtype=bool))


def run_kernels(kernels: Sequence[Kernel], params: Sequence[Buffer],
                workspace: Sequence[Buffer], arrays: Sequence[np.ndarray],
                check_races: bool = True) -> None:
    """Run ``kernels`` in order over the function's ``arrays`` (one per ``params`` entry)."""
    if len(arrays) != len(params):
        raise EmulationError(f"expected {len(params)} arrays, got {len(arrays)}")
    flat: dict[Buffer, np.ndarray] = {}
    for b, a in zip(params, arrays):
        if not isinstance(a, np.ndarray) or a.dtype != _ndt(b.dtype) or not a.flags.c_contiguous:
            raise EmulationError(f"argument {b.name}: expected a C-contiguous {b.dtype} array")
        flat[b] = a.reshape(-1)
    for b in workspace:
        fill = np.nan if dt.is_float(b.dtype) else 0
        flat[b] = np.full(buffer_size(b), fill, dtype=_ndt(b.dtype))
    env = _shape_env(params, arrays)
    for k in kernels:
        run_kernel(specialize(k, env) if k.scalars else k, flat, check_races)


def _shape_env(params: Sequence[Buffer], arrays: Sequence[np.ndarray]) -> dict[Var, int]:
    """Shape variables bound from the arrays (each a whole dimension of some parameter)."""
    env: dict[Var, int] = {}
    for b, a in zip(params, arrays):
        if a.ndim != len(b.shape):
            raise EmulationError(f"argument {b.name}: {a.ndim} dimensions, expected "
                                 f"{len(b.shape)}")
        for d, got in zip(b.shape, a.shape):
            if type(d) is Var and env.setdefault(d, got) != got:
                raise EmulationError(f"argument {b.name}: {d.name} = {got} disagrees with "
                                     f"{env[d]} from an earlier argument")
    return env


def run_module(module: Any, arrays: Sequence[np.ndarray], check_races: bool = True) -> None:
    """Emulate a :class:`~templtune.runtime.cuda.module.CudaModule` built in this process."""
    if not module.kernels:
        raise EmulationError("this CUDA module carries no kernel IR to emulate")
    by_name = {p.name for p in module.params}
    params = [b for k in module.kernels for b in k.params if b.name in by_name]
    order = {p.name: i for i, p in enumerate(module.params)}
    uniq: dict[str, Buffer] = {}
    for b in params:
        uniq.setdefault(b.name, b)
    flat: dict[Buffer, np.ndarray] = {}
    for name, b in uniq.items():
        a = arrays[order[name]]
        flat[b] = a.reshape(-1)
    ws_names = {w.name for w in module.workspace}
    for k in module.kernels:
        for b in k.params:
            if b.name in ws_names and b not in flat:
                flat[b] = np.full(buffer_size(b), np.nan if dt.is_float(b.dtype) else 0,
                                  dtype=_ndt(b.dtype))
    env = _shape_env([uniq[p.name] for p in module.params if p.name in uniq],
                     [arrays[order[p.name]] for p in module.params if p.name in uniq])
    for k in module.kernels:
        run_kernel(specialize(k, env) if k.scalars else k, flat, check_races)


def emulate(func: PrimFunc, *arrays: np.ndarray, check_races: bool = True,
            insert_sync: bool = True) -> None:
    """Lower ``func`` with the CUDA pipeline and run it on the CPU over ``arrays`` (in place).

    ``insert_sync=False`` skips barrier insertion, which the race detector must then catch.
    """
    from templtune.codegen.cuda.build import lower_to_kernels

    kernels, workspace = lower_to_kernels(func, insert_sync=insert_sync)
    run_kernels(kernels, func.params, workspace, arrays, check_races)


__all__ = ["emulate", "run_kernel", "run_kernels", "run_module", "RaceError", "EmulationError",
           "BLOCK_TAGS", "THREAD_TAGS"]
