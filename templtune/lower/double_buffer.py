"""Double buffering of a stage's buffer (``Stage.double_buffer``), after TVM's InjectDoubleBuffer.

Lowering wraps the nest of a double-buffered stage, emitted at its attach point inside a loop
``ko``, in ``AttrStmt("double_buffer_scope", buffer, stage_name)``. This pass then

* allocates the buffer twice as large, right around ``ko`` (the allocation leaves the loop);
* emits the producer once before the loop, for ``ko = 0``, into half 0 (the prologue);
* in the loop body, replaces the producer by the prefetch of iteration ``ko + 1`` into half
  ``(ko + 1) % 2``, guarded by ``ko + 1 < extent`` and marked ``double_buffer_write``;
* points every read of the buffer at half ``ko % 2``.

The ``double_buffer_write`` mark tells the CUDA barrier planner that reads following the
prefetch in the same iteration use the other half, so one ``__syncthreads()`` per iteration
suffices (TVM's storage-sync rule). ``ko`` is the innermost loop around the attach point that is
not bound to a thread, as TVM's. Unlike TVM's default (``split_loop=1``), the last iteration is
not peeled off: the guard skips its prefetch, so the consumer's code is not duplicated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from templtune.errors import LoweringError
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Load,
    Ramp,
    Stmt,
    Store,
    seq,
)
from templtune.lower.passes import _Cleanup
from templtune.te.expr import BinOp, BinOpKind, PrimExpr, Var, const, const_int
from templtune.te.functor import Mutator, children, collect, handles, substitute

#: key of the mark lowering puts around a double-buffered stage's nest (value: the stage name)
DB_SCOPE = "double_buffer_scope"
#: key of the mark around the prefetch this pass emits (value: the double-buffered loop's var)
DB_WRITE = "double_buffer_write"


@dataclass(eq=False)
class _Entry:
    stage: str
    old: Buffer
    loop: For
    new: Buffer = field(init=False)
    stride: PrimExpr = field(init=False)
    switch: Var = field(init=False)
    prologue: Stmt | None = None

    def __post_init__(self) -> None:
        (size,) = self.old.shape
        self.stride = size
        n = const_int(size)
        total: PrimExpr = const(2 * n) if n is not None else size * 2
        self.new = Buffer(self.old.name, (total,), self.old.dtype, self.old.scope, self.old.data)
        self.switch = Var(f"{self.loop.loop_var.name}.db", self.loop.loop_var.dtype)


def check_attached(stages: Iterable[Any]) -> None:
    """TVM's first precondition: each double-buffered stage is computed inside a loop of its
    consumer (``compute_at``), not inlined or at the root."""
    for st in stages:
        if st.double_buffered and st.attach_type != "scope":
            where = "inlined" if st.attach_type == "inline" else "computed at the root"
            raise LoweringError(f"stage {st.op.name}: double_buffer needs the stage attached "
                                f"inside a loop of its consumer (compute_at), but it is {where}")


def mark_double_buffer(op: Any, buffer: Buffer, body: Stmt, unit_loop: bool) -> Stmt:
    """``body`` (the nest of stage ``op``, emitted at its attach point) with the
    ``double_buffer_scope`` mark; unchanged when the attach loop has one iteration (lowering
    removes such a loop, and there is nothing to overlap)."""
    if op.num_outputs != 1:
        raise LoweringError(f"stage {op.name}: double_buffer needs a single-output stage (it "
                            f"has {op.num_outputs})")
    return body if unit_loop else AttrStmt(DB_SCOPE, buffer, op.name, body)


def _fmod2(e: PrimExpr) -> PrimExpr:
    return BinOp(BinOpKind.FLOORMOD, e, const(2, e.dtype), e.dtype)


def _offset(index: PrimExpr, off: PrimExpr) -> PrimExpr:
    if isinstance(index, Ramp):
        return Ramp(index.base + off, index.stride, index.lanes)
    return index + off


def _find(s: Stmt, loops: list[For], allocs: list[tuple[Buffer, int]],
          out: dict[Buffer, _Entry]) -> None:
    """Record each double-buffer scope with its loop; check TVM's preconditions."""
    if isinstance(s, AttrStmt) and s.key == DB_SCOPE:
        buf, stage = s.node, str(s.value)
        if not loops:
            raise LoweringError(f"stage {stage}: double_buffer needs the stage attached inside a "
                                f"loop (compute_at at a serial loop of its consumer), but no "
                                f"loop that is not bound to a thread encloses it")
        loop = loops[-1]
        if loop.kind not in (ForKind.SERIAL, ForKind.UNROLLED):
            raise LoweringError(f"stage {stage}: double_buffer prefetches across iterations of "
                                f"loop {loop.loop_var.name}, which is {loop.kind.name.lower()} "
                                f"(it must be a serial loop)")
        if const_int(loop.min) != 0:
            raise LoweringError(f"stage {stage}: double_buffer needs loop {loop.loop_var.name} "
                                f"to start at 0")
        if buf in out:
            raise LoweringError(f"stage {stage}: buffer {buf.name} is double-buffered twice")
        depth = len(loops)
        pos = next((d for b, d in allocs if b is buf), None)
        if pos is None or pos < depth:
            raise LoweringError(f"stage {stage}: double_buffer needs the buffer {buf.name} "
                                f"allocated inside loop {loop.loop_var.name}")
        if len(buf.shape) != 1:
            raise LoweringError(f"stage {stage}: double_buffer expects a flat buffer")
        inner = {b for b, d in allocs if d >= depth and b is not buf}
        stale = collect(s.body, lambda x: isinstance(x, Load) and x.buffer in inner)
        if stale:
            raise LoweringError(
                f"stage {stage}: double_buffer prefetches iteration "
                f"{loop.loop_var.name} + 1, but the stage reads {stale[0].buffer.name}, which is "
                f"computed for the current iteration inside the same loop")
        out[buf] = _Entry(stage, buf, loop)
    if isinstance(s, For):
        if s.kind is not ForKind.THREAD_BINDING:
            loops = loops + [s]
    elif isinstance(s, Allocate):
        allocs = allocs + [(s.buffer, len(loops))]
    for c in children(s):
        if isinstance(c, Stmt):
            _find(c, loops, allocs, out)


class _Injector(Mutator):
    def __init__(self, entries: dict[Buffer, _Entry],
                 ranges: Mapping[Var, tuple[int, int]] | None) -> None:
        self.entries = entries
        self.by_loop: dict[Var, list[_Entry]] = {}
        for e in entries.values():
            self.by_loop.setdefault(e.loop.loop_var, []).append(e)
        self.ranges = dict(ranges or {})
        self.active: set[Var] = set()
        self.producing: _Entry | None = None

    def _clean(self, s: Stmt) -> Stmt:
        out: Stmt = _Cleanup(self.ranges).visit(s)
        return out

    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        self.active.add(node.loop_var)
        try:
            new = self.generic(node)
        finally:
            self.active.discard(node.loop_var)
        entries = self.by_loop.get(node.loop_var)
        if not entries:
            return new
        out: Stmt = seq(*[e.prologue for e in entries], new)
        for e in reversed(entries):
            out = Allocate(e.new, out)
        return out

    @handles(Allocate)
    def visit_Allocate(self, node: Allocate) -> Stmt:
        if node.buffer in self.entries:
            return self.visit(node.body)
        return self.generic(node)

    @handles(AttrStmt)
    def visit_AttrStmt(self, node: AttrStmt) -> Stmt:
        if node.key != DB_SCOPE:
            return self.generic(node)
        e = self.entries[node.node]
        ko = e.loop.loop_var
        self.producing = e
        try:
            body = self.visit(node.body)
        finally:
            self.producing = None
        zero = const(0, ko.dtype)
        e.prologue = self._clean(substitute(body, {ko: zero, e.switch: zero}))
        nxt = ko + const(1, ko.dtype)
        fetch = self._clean(substitute(body, {ko: nxt, e.switch: _fmod2(nxt)}))
        return IfThenElse(nxt < e.loop.extent, AttrStmt(DB_WRITE, e.new, ko, fetch))

    @handles(Store)
    def visit_Store(self, node: Store) -> Stmt:
        node = self.generic(node)
        e = self.entries.get(node.buffer)
        if e is None:
            return node
        if self.producing is not e:
            raise LoweringError(f"stage {e.stage}: its double-buffered buffer {e.old.name} is "
                                f"written outside the stage's own nest")
        return Store(e.new, _offset(node.index, e.switch * e.stride), node.value, node.predicate)

    @handles(Load)
    def visit_Load(self, node: Load) -> PrimExpr:
        node = self.generic(node)
        e = self.entries.get(node.buffer)
        if e is None:
            return node
        ko = e.loop.loop_var
        if ko not in self.active or self.producing is e:
            raise LoweringError(f"stage {e.stage}: double-buffered {e.old.name} is read outside "
                                f"loop {ko.name}, where no half of it is current")
        return Load(e.new, _offset(node.index, _fmod2(ko) * e.stride), node.predicate)


def inject_double_buffer(body: Stmt,
                         ranges: Mapping[Var, tuple[int, int]] | None = None) -> Stmt:
    """Apply every ``double_buffer_scope`` mark of ``body`` (see the module docstring).

    Parameters
    ----------
    body : Stmt
        A loop nest from :func:`templtune.lower.nest.build_nest`.
    ranges : Mapping[Var, (lo, hi)], optional
        Loop-variable ranges, for simplifying the prologue's and the prefetch's indices.

    Raises
    ------
    LoweringError
        Naming the stage, where TVM's preconditions fail: the stage is not inside a serial loop
        starting at 0, its buffer is written elsewhere or read outside that loop, or its nest
        reads a buffer computed inside the same loop (the prefetch would read stale data).
    """
    entries: dict[Buffer, _Entry] = {}
    _find(body, [], [], entries)
    if not entries:
        return body
    return _Injector(entries, ranges).visit(body)


__all__ = ["check_attached", "inject_double_buffer", "mark_double_buffer", "DB_SCOPE", "DB_WRITE"]
