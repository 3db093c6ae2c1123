"""Fast CPU check of CUDA kernels: turn each kernel into a host PrimFunc and build it with the
LLVM backend.

The GPU semantics are kept by *loop fission at barriers*: a kernel body runs, per block, as a
sequence of phases; each barrier-free region becomes a serial loop over the block's threads, and
statements that contain a barrier (uniform loops and ``if``s) are split recursively, so every
thread finishes a phase before any starts the next, as ``__syncthreads`` guarantees. Local
arrays get one slice per thread; shared arrays one copy per block iteration. This runs real
shapes at native speed but does not look for races: use :mod:`templtune.runtime.cuda.emulate`
on small shapes for that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import (
    RefCache,
    buffer_size,
    fast_substitute,
    iter_nodes,
)
from templtune.codegen.cuda.kernel import BLOCK_TAGS, THREAD_TAGS, Kernel
from templtune.codegen.cuda.sync import is_barrier
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    SeqStmt,
    Stmt,
    Store,
    seq,
)
from templtune.runtime.cuda.emulate import EmulationError, RaceError
from templtune.te.dispatch import Dispatch
from templtune.te.expr import PrimExpr, Var, const
from templtune.te.functor import Mutator, handles


class _PerThread(Mutator):
    """Point local-array accesses at thread ``tid``'s slice of the expanded array."""

    def __init__(self, local: dict[Buffer, tuple[Buffer, int]], tid: PrimExpr) -> None:
        self.local, self.tid = local, tid

    def _index(self, index: PrimExpr, size: int) -> PrimExpr:
        off = self.tid * size
        if isinstance(index, Ramp):
            return Ramp(index.base + off, index.stride, index.lanes)
        return index + off

    @handles(Load)
    def visit_Load(self, node: Load) -> PrimExpr:
        node = self.generic(node)
        hit = self.local.get(node.buffer)
        return node if hit is None else replace(node, buffer=hit[0],
                                                index=self._index(node.index, hit[1]))

    @handles(Store)
    def visit_Store(self, node: Store) -> Stmt:
        node = self.generic(node)
        hit = self.local.get(node.buffer)
        return node if hit is None else replace(node, buffer=hit[0],
                                                index=self._index(node.index, hit[1]))


class _Fission:
    def __init__(self, k: Kernel) -> None:
        self.k = k
        self.nt = k.threads_per_block
        self.tvars = {t: v for t, v in k.thread_vars if t in THREAD_TAGS}
        self.rc = RefCache()
        self.local: dict[Buffer, tuple[Buffer, int]] = {}
        self.shared: dict[Buffer, tuple[Buffer, int]] = {}
        for b in k.allocs:
            size = buffer_size(b)
            if b.scope == "local":
                self.local[b] = (Buffer(b.name, (const(size * self.nt),), b.dtype, "local"), size)
            else:  # shared: one copy per block iteration, renamed to a plain host array
                self.shared[b] = (Buffer(b.name, (const(size),), b.dtype, "local"), 0)
        self._barrier_memo: dict[int, bool] = {}
        self._count = 0

    def has_barrier(self, s: Any) -> bool:
        key = id(s)
        hit = self._barrier_memo.get(key)
        if hit is None:
            hit = any(isinstance(n, Stmt) and is_barrier(n) for n in iter_nodes(s))
            self._barrier_memo[key] = hit
        return hit

    def thread_dependent(self, e: Any) -> bool:
        return self.rc.touches(e, set(self.tvars.values()))

    def thread_loop(self, s: Stmt) -> Stmt:
        self._count += 1
        t = Var(f"tid{self._count}", "int32")
        bx, by, _ = self.k.block
        vmap: dict[Var, PrimExpr] = {}
        for tag, v in self.tvars.items():
            vmap[v] = {"threadIdx.x": t % bx if bx > 1 else const(0),
                       "threadIdx.y": (t // bx) % by if by > 1 else const(0),
                       "threadIdx.z": t // (bx * by)}[tag]
        body = _PerThread(self.local, t).visit(fast_substitute(s, vmap))
        return For(t, const(0), const(self.nt), ForKind.SERIAL, body)

    def run(self, s: Stmt) -> Stmt:
        if is_barrier(s):
            return SeqStmt(())
        if not self.has_barrier(s):
            return self.thread_loop(s)
        return _SPLIT(self, s)


# NOTE: how a statement that contains a barrier is split into phases, per statement type.
_SPLIT: Dispatch[Stmt] = Dispatch("host emulation split")


@_SPLIT.register(Stmt)
def _split_other(f: _Fission, s: Stmt) -> Stmt:
    raise EmulationError(f"{f.k.name}: cannot split {type(s).__name__} at barriers")


@_SPLIT.register(SeqStmt)
def _split_seq(f: _Fission, s: SeqStmt) -> Stmt:
    out: list[Stmt] = []
    run: list[Stmt] = []
    for c in s.seq:
        if f.has_barrier(c):
            if run:
                out.append(f.thread_loop(seq(*run)))
                run = []
            out.append(f.run(c))
        else:
            run.append(c)
    if run:
        out.append(f.thread_loop(seq(*run)))
    return seq(*out)


@_SPLIT.register(For)
def _split_for(f: _Fission, s: For) -> Stmt:
    if f.thread_dependent(s.min) or f.thread_dependent(s.extent):
        raise EmulationError(f"{f.k.name}: a loop with thread-dependent bounds encloses a "
                             "barrier")
    return replace(s, body=f.run(s.body), kind=ForKind.SERIAL)


@_SPLIT.register(IfThenElse)
def _split_if(f: _Fission, s: IfThenElse) -> Stmt:
    if f.thread_dependent(s.condition):
        raise RaceError(f"{f.k.name}: __syncthreads() inside a thread-dependent if")
    return replace(s, then_case=f.run(s.then_case),
                   else_case=None if s.else_case is None else f.run(s.else_case))


@_SPLIT.register(LetStmt)
def _split_let(f: _Fission, s: LetStmt) -> Stmt:
    if f.thread_dependent(s.value):
        raise EmulationError(f"{f.k.name}: thread-dependent let around a barrier is not "
                             "supported by the host emulation")
    return replace(s, body=f.run(s.body))


@_SPLIT.register(AttrStmt)
def _split_attr(f: _Fission, s: AttrStmt) -> Stmt:
    return replace(s, body=f.run(s.body))


class _Rename(Mutator):
    def __init__(self, mapping: dict[Buffer, Buffer]) -> None:
        self.mapping = mapping

    @handles(Load)
    def visit_Load(self, node: Load) -> PrimExpr:
        node = self.generic(node)
        nb = self.mapping.get(node.buffer)
        return node if nb is None else replace(node, buffer=nb)

    @handles(Store)
    def visit_Store(self, node: Store) -> Stmt:
        node = self.generic(node)
        nb = self.mapping.get(node.buffer)
        return node if nb is None else replace(node, buffer=nb)


def kernel_to_host(kernel: Kernel) -> PrimFunc:
    """A host PrimFunc over ``kernel.params`` computing what the kernel computes."""
    f = _Fission(kernel)
    body = f.run(kernel.body)
    body = _Rename({b: nb for b, (nb, _) in f.shared.items()}).visit(body)
    blk = Var("block_id", "int32")
    gx, gy, _ = kernel.grid
    bvars = {t: v for t, v in kernel.thread_vars if t in BLOCK_TAGS}
    vmap: dict[Var, PrimExpr] = {}
    for tag, v in bvars.items():
        vmap[v] = {"blockIdx.x": blk % gx, "blockIdx.y": (blk // gx) % gy,
                   "blockIdx.z": blk // (gx * gy)}[tag]
    body = fast_substitute(body, vmap)
    for nb, _ in list(f.local.values()) + list(f.shared.values()):
        body = Allocate(nb, body)
    # NOTE: a symbolic launch counts blocks in shape variables, which the host function binds
    n_blocks: int | PrimExpr = kernel.grid[0]
    for g in kernel.grid[1:]:
        if not (type(g) is int and g == 1):
            n_blocks = n_blocks * g
    top = For(blk, const(0), const(n_blocks) if isinstance(n_blocks, int) else n_blocks,
              ForKind.SERIAL, body)
    return PrimFunc(kernel.name + "_host", kernel.params, top)


def build_host(func: PrimFunc) -> Any:
    """Compile a host PrimFunc for this CPU and load it (a :class:`templtune.runtime.Module`)."""
    from templtune.codegen.llvm import compile_func
    from templtune.runtime.module import Module

    return Module(*compile_func(func))


def emulate_llvm(func: PrimFunc, *arrays: np.ndarray) -> None:
    """Run ``func`` (GPU-bound loop IR) on the CPU through the LLVM backend, in place."""
    from templtune.codegen.cuda.build import lower_to_kernels

    kernels, workspace = lower_to_kernels(func)
    if len(arrays) != len(func.params):
        raise EmulationError(f"expected {len(func.params)} arrays, got {len(arrays)}")
    store: dict[Buffer, np.ndarray] = dict(zip(func.params, arrays))
    for b in workspace:
        store[b] = np.zeros(buffer_size(b), dtype=dt.to_numpy(b.dtype))
    for k in kernels:
        host = kernel_to_host(k)
        module = build_host(host)
        module(*[_shaped(store[b], b) for b in k.params])


def _shaped(arr: np.ndarray, b: Buffer) -> np.ndarray:
    from templtune.te.expr import const_int

    shape = tuple(const_int(s) for s in b.shape)
    if None in shape or arr.shape == shape:
        return arr
    return arr.reshape(shape)  # type: ignore[arg-type]


__all__: Sequence[str] = ["kernel_to_host", "emulate_llvm", "build_host"]
