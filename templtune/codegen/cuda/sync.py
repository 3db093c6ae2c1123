"""Insert ``__syncthreads()`` between conflicting shared-memory accesses of different threads.

The planner walks statement sequences keeping the shared-memory accesses made since the last
barrier. Before a sequence element whose accesses conflict with them (a read after another
thread's write, a write after another thread's read) it inserts a barrier, at the
highest sequence level, so the barrier is not repeated inside inner loops. Loops are analysed to a
fixed point with the accesses at the end of one iteration flowing into the next, which places the
barrier that protects a shared tile from being overwritten while other threads still read it
(at the top of the loop body).

A prefetch that double buffering marks ``double_buffer_write`` writes the half of its buffer that
the rest of the iteration does not read, so reads after it in the same iteration do not conflict
with it (TVM's rule); across iterations of its loop it is an ordinary write.

Two accesses are by *the same thread* only when their indices are structurally equal and depend on
nothing but thread indices covering every multi-thread axis; everything else conflicts
(conservative: an extra barrier costs time, a missing one gives wrong answers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

from templtune.codegen.cuda.analysis import free_vars, node_children
from templtune.codegen.cuda.kernel import THREAD_TAGS, Kernel
from templtune.lower.double_buffer import DB_WRITE
from templtune.lower.ir import (
    AttrStmt,
    Buffer,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    Load,
    SeqStmt,
    Stmt,
    Store,
    seq,
)
from templtune.te.expr import Call, PrimExpr, StringImm, Var
from templtune.te.functor import post_order

_FIELDS: dict[type, tuple[str, ...]] = {}


def barrier() -> Stmt:
    """The loop-IR form of ``__syncthreads()``."""
    return Evaluate(Call("int32", "tvm_storage_sync", (StringImm("shared"),)))


def is_barrier(s: Stmt) -> bool:
    return (isinstance(s, Evaluate) and isinstance(s.value, Call)
            and s.value.name == "tvm_storage_sync")


@dataclass(frozen=True, slots=True, eq=False)
class _Access:
    buffer: Buffer
    write: bool
    index: PrimExpr
    # the double-buffered loop's variable, for a prefetch write (see the module docstring)
    db_loop: Any = None


def _carry(accs: list[_Access], loop_var: Var) -> list[_Access]:
    """``accs`` as seen from the next iteration of ``loop_var`` (or after the loop): its
    prefetches become ordinary writes."""
    return [replace(a, db_loop=None) if a.db_loop is loop_var else a for a in accs]


class _Planner:
    def __init__(self, kernel: Kernel) -> None:
        self.tvars = frozenset(v for t, v in kernel.thread_vars if t in THREAD_TAGS
                               and kernel.block[THREAD_TAGS.index(t)] > 1)
        self._memo: dict[int, tuple[Any, list[_Access]]] = {}
        self._keys: dict[int, tuple[Any, Any]] = {}
        self._intern: dict[Any, int] = {}

    def accesses(self, s: Any) -> list[_Access]:
        hit = self._memo.get(id(s))
        if hit is not None:
            return hit[1]
        out: list[_Access] = []
        if isinstance(s, (Load, Store)) and s.buffer.scope == "shared":
            out.append(_Access(s.buffer, isinstance(s, Store), s.index))
        for c in node_children(s):
            out.extend(self.accesses(c))
        if isinstance(s, AttrStmt) and s.key == DB_WRITE:
            out = [replace(a, db_loop=s.value) if a.write else a for a in out]
        self._memo[id(s)] = (s, out)
        return out

    def key(self, e: Any) -> Any:
        """A hashable structural key of ``e`` (equal keys <=> ``structural_equal``), memoised
        by node identity: the planner compares and deduplicates thousands of indices on
        unrolled kernels, where pairwise ``structural_equal`` was quadratic."""
        hit = self._keys.get(id(e))
        if hit is not None:
            return hit[1]
        if isinstance(e, Var):
            k: Any = ("V", id(e))
        elif isinstance(e, Buffer):
            k = ("B", id(e))
        elif isinstance(e, tuple):
            return tuple(self.key(x) for x in e)
        elif dataclasses.is_dataclass(e):
            names = _FIELDS.get(type(e))
            if names is None:
                names = tuple(f.name for f in dataclasses.fields(e)
                              if not f.name.startswith("_"))
                _FIELDS[type(e)] = names
            k = (type(e).__name__,) + tuple(self.key(getattr(e, n)) for n in names)
            # NOTE: interned to a small int, so parents hash flat tuples, not whole trees
            k = self._intern.setdefault(k, len(self._intern))
        else:
            return e
        self._keys[id(e)] = (e, k)
        return k

    def same_thread(self, a: _Access, b: _Access) -> bool:
        if self.key(a.index) != self.key(b.index):
            return False
        fv = free_vars(a.index)
        return all(isinstance(v, Var) and v in self.tvars for v in fv) and self.tvars <= fv

    def conflicts(self, pending: list[_Access], accs: list[_Access]) -> bool:
        for a in accs:
            for p in pending:
                # NOTE: read-after-write and write-after-read only, as barriers order those; a
                # write-write overlap of different threads is a schedule bug no barrier fixes.
                if p.db_loop is not None and not a.write:
                    continue  # the read is of the half the prefetch does not write
                if (p.buffer is a.buffer and p.write != a.write
                        and not self.same_thread(p, a)):
                    return True
        return False

    def union(self, a: list[_Access], b: list[_Access]) -> list[_Access]:
        out = list(a)
        seen = {(id(y.buffer), y.write, id(y.db_loop), self.key(y.index)) for y in out}
        for x in b:
            kx = (id(x.buffer), x.write, id(x.db_loop), self.key(x.index))
            if kx not in seen:
                seen.add(kx)
                out.append(x)
        return out

    def plan(self, s: Stmt, pending: list[_Access]) -> tuple[Stmt, list[_Access]]:
        if isinstance(s, SeqStmt):
            out: list[Stmt] = []
            for c in s.seq:
                c2, pending = self.plan_child(c, pending)
                out.append(c2)
            return seq(*out), pending
        return self.plan_child(s, pending)

    def plan_child(self, s: Stmt, pending: list[_Access]) -> tuple[Stmt, list[_Access]]:
        if is_barrier(s):
            return s, []
        accs = self.accesses(s)
        if not accs:
            return s, pending
        pre = None
        if self.conflicts(pending, accs):
            pre, pending = barrier(), []
        s2, out = self.plan_inner(s, pending, accs)
        return seq(pre, s2), out

    def plan_inner(self, s: Stmt, pending: list[_Access],
                   accs: list[_Access]) -> tuple[Stmt, list[_Access]]:
        if isinstance(s, SeqStmt):  # a nested sequence
            return self.plan(s, pending)
        if isinstance(s, For):
            entry = pending
            for _ in range(4):
                body, exit_ = self.plan(s.body, entry)
                exit_ = _carry(exit_, s.loop_var)
                nxt = self.union(entry, exit_)
                if len(nxt) == len(entry):
                    break
                entry = nxt
            return replace(s, body=body), exit_
        if isinstance(s, IfThenElse):
            t, p1 = self.plan(s.then_case, pending)
            if s.else_case is None:
                return replace(s, then_case=t), self.union(p1, pending)
            e, p2 = self.plan(s.else_case, pending)
            return replace(s, then_case=t, else_case=e), self.union(p1, p2)
        inner = getattr(s, "body", None)
        if isinstance(inner, Stmt):
            b2, out = self.plan(inner, pending)
            if isinstance(s, AttrStmt) and s.key == DB_WRITE:
                old = {id(a) for a in pending}
                out = [replace(a, db_loop=s.value) if a.write and id(a) not in old else a
                       for a in out]
            return replace(s, body=b2), out  # type: ignore[call-arg, type-var]
        return s, self.union(pending, accs)


def insert_shared_sync(kernel: Kernel) -> Kernel:
    """Return ``kernel`` with the barriers its shared-memory accesses need."""
    if not any(b.scope == "shared" for b in kernel.allocs):
        return kernel
    body, _ = _Planner(kernel).plan(kernel.body, [])
    tvars = frozenset(v for t, v in kernel.thread_vars if t in THREAD_TAGS)
    return replace(kernel, body=_push_guards(body, tvars))


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(n, Evaluate) and is_barrier(n) for n in post_order(s))


def _push_guards(s: Stmt, tvars: frozenset[Var]) -> Stmt:
    """Move thread-dependent ``if`` guards below the barriers they enclose.

    A binding with a smaller extent than its launch dimension is guarded by
    ``if (threadIdx.x < n)``; a barrier inside that guard would be reached by part of the block
    (undefined behaviour, usually a hang). Loops and lets inside such a guard are uniform, so
    the guard can move down onto each statement that is not a barrier.
    """
    if isinstance(s, SeqStmt):
        return seq(*(_push_guards(c, tvars) for c in s.seq))
    if isinstance(s, IfThenElse):
        if (s.else_case is None and _has_barrier(s.then_case)
                and free_vars(s.condition) & tvars):
            return _distribute(s.condition, _push_guards(s.then_case, tvars))
        return replace(s, then_case=_push_guards(s.then_case, tvars),
                       else_case=None if s.else_case is None
                       else _push_guards(s.else_case, tvars))
    body = getattr(s, "body", None)
    if isinstance(body, Stmt):
        return replace(s, body=_push_guards(body, tvars))  # type: ignore[call-arg, type-var]
    return s


def _distribute(cond: PrimExpr, s: Stmt) -> Stmt:
    if is_barrier(s) or not _has_barrier(s):
        return s if is_barrier(s) else IfThenElse(cond, s)
    if isinstance(s, SeqStmt):
        return seq(*(_distribute(cond, c) for c in s.seq))
    if isinstance(s, IfThenElse) and s.else_case is None:
        return _distribute(cond & s.condition, s.then_case)
    if isinstance(s, For) or (isinstance(s, LetStmt) and not any(
            isinstance(n, Load) for n in post_order(s.value))) or isinstance(s, AttrStmt):
        return replace(s, body=_distribute(cond, s.body))  # type: ignore[call-arg, type-var]
    return IfThenElse(cond, s)


def strip_barriers(kernel: Kernel) -> Kernel:
    """``kernel`` without any barrier (for tests of the race detector)."""
    from templtune.te.functor import Mutator, handles

    class _Strip(Mutator):
        @handles(SeqStmt)
        def visit_SeqStmt(self, node: SeqStmt) -> Stmt:
            kept = [self.visit(c) for c in node.seq if not is_barrier(c)]
            return seq(*kept) if kept else Evaluate(Call("int32", "tvm_noop", ()))

    return replace(kernel, body=_Strip().visit(kernel.body))
