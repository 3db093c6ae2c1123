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
    Shuffle,
    Stmt,
    Store,
)
from templtune.runtime.cuda.emulate_memory import (
    EmulationError,
    RaceError,
    _LaunchMemory,
    _Mem,
    _ndt,
)
from templtune.te.dispatch import Dispatch
from templtune.te.expr import BinOp, BinOpKind, Call, Cast, FloatImm, IntImm, Not, Select, Var

# NOTE: lanes per lockstep chunk; bounds memory (local arrays are lanes x size) while keeping
# numpy calls large enough to amortise the interpreter.
MAX_LANES = 1 << 15


_UNARY: dict[str, Callable[..., Any]] = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
          "log1p": np.log1p, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
          "tan": np.tan, "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
          "round": np.round, "trunc": np.trunc, "atan": np.arctan, "asin": np.arcsin,
          "acos": np.arccos, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}


class _Launch(_LaunchMemory):
    """A launch that evaluates loop IR over its lanes (memory and races: the base class)."""

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


@_EV.register(Shuffle)
def _shuffle(r: _Launch, e: Shuffle, mask: np.ndarray) -> Any:
    v = np.asarray(r.ev(e.vector, mask))
    # one lane is a scalar (a reduction tree's last step): no lane axis
    return v[..., e.indices[0]] if len(e.indices) == 1 else v[..., list(e.indices)]


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
