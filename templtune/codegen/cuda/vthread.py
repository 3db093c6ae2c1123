"""Virtual-thread injection: expand ``vthread`` loops in place (in the spirit of TVM's
InjectVirtualThread, written from its documented behaviour).

A vthread loop promises that its iterations are independent. Instead of running the whole body
once per virtual thread, the loop is pushed down to the statements that actually depend on the
vthread variable and replicated there, so statements that do not (cooperative loads into shared
memory, barriers) run once and the replicated arithmetic interleaves (instruction-level
parallelism). Local arrays written with vthread-dependent values get one slice per virtual thread.
"""

from __future__ import annotations

from dataclasses import replace

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import (
    RefCache,
    buffer_size,
    const_value,
    fast_substitute,
    node_children,
)
from templtune.codegen.cuda.kernel import is_vthread
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Broadcast,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    Ramp,
    SeqStmt,
    Stmt,
    Store,
    seq,
)
from templtune.te.expr import PrimExpr, Var, const
from templtune.te.functor import Mutator, handles

# NOTE: above this many virtual threads the replicated statement becomes a serial loop instead of
# being unrolled, to bound code size (TVM uses the same order of magnitude).
MAX_UNROLL = 16


class _Retarget(Mutator):
    """Point accesses of expanded buffers at their per-vthread slice."""

    def __init__(self, expanded: dict[Buffer, tuple[Buffer, int]], vt: PrimExpr) -> None:
        self.expanded = expanded
        self.vt = vt

    def _rebase(self, node: Load | Store) -> Load | Store:
        """``node`` (a Load or Store) moved to this virtual thread's slice of its expanded
        buffer, when its buffer was expanded."""
        node = self.generic(node)
        hit = self.expanded.get(node.buffer)
        if hit is None:
            return node
        nb, size = hit
        return replace(node, buffer=nb, index=_offset(node.index, self.vt * size))

    @handles(Load)
    def visit_Load(self, node: Load) -> PrimExpr:
        out = self._rebase(node)
        assert isinstance(out, Load)
        return out

    @handles(Store)
    def visit_Store(self, node: Store) -> Stmt:
        out = self._rebase(node)
        assert isinstance(out, Store)
        return out

    @handles(Allocate)
    def visit_Allocate(self, node: Allocate) -> Stmt:
        body = self.visit(node.body)
        hit = self.expanded.get(node.buffer)
        return Allocate(hit[0] if hit else node.buffer, body)


def _offset(index: PrimExpr, off: PrimExpr) -> PrimExpr:
    if isinstance(index, Ramp):
        return Ramp(index.base + off, index.stride, index.lanes)
    lanes = dt.lanes(index.dtype)
    return index + (Broadcast(off, lanes) if lanes > 1 else off)


class _Injector:
    def __init__(self, loop: For) -> None:
        self.var = loop.loop_var
        self.n = const_value(loop.extent, "vthread extent")
        self.min = const_value(loop.min, "vthread min")
        body = loop.body
        self.rc = RefCache()
        stores: list[Store] = []
        lets: list[LetStmt] = []
        allocs: list[Allocate] = []
        stack: list[object] = [body]
        while stack:
            node = stack.pop()
            if isinstance(node, Store):
                stores.append(node)
            elif isinstance(node, LetStmt):
                lets.append(node)
            elif isinstance(node, Allocate):
                allocs.append(node)
            if isinstance(node, Stmt):
                stack.extend(c for c in node_children(node) if isinstance(c, Stmt))
        targets: set[object] = {self.var}
        changed = True
        while changed:
            changed = False
            for st in stores:
                if st.buffer not in targets and self.rc.touches(st, targets):
                    targets.add(st.buffer)
                    changed = True
            for lt in lets:
                if lt.var not in targets and self.rc.touches(lt.value, targets):
                    targets.add(lt.var)
                    changed = True
        self.targets = targets
        self.expanded: dict[Buffer, tuple[Buffer, int]] = {}
        for node in allocs:
            if node.buffer in targets and node.buffer not in self.expanded:
                b = node.buffer
                size = buffer_size(b)
                nb = Buffer(b.name, (const(size * self.n),), b.dtype, b.scope, b.data)
                self.expanded[b] = (nb, size)
        self.body = body

    def touched(self, s: Stmt | PrimExpr) -> bool:
        return self.rc.touches(s, self.targets)

    def run(self) -> Stmt:
        return self.transform(self.body)

    def transform(self, s: Stmt) -> Stmt:
        if not self.touched(s):
            return s
        if isinstance(s, SeqStmt):
            return seq(*(self.transform(c) for c in s.seq))
        if isinstance(s, For):
            if self.touched(s.min) or self.touched(s.extent):
                return self.replicate(s)
            return replace(s, body=self.transform(s.body))
        if isinstance(s, IfThenElse):
            if self.touched(s.condition):
                return self.replicate(s)
            return replace(s, then_case=self.transform(s.then_case),
                           else_case=None if s.else_case is None else self.transform(s.else_case))
        if isinstance(s, Allocate):
            hit = self.expanded.get(s.buffer)
            return Allocate(hit[0] if hit else s.buffer, self.transform(s.body))
        if isinstance(s, LetStmt):
            if self.touched(s.value):
                return self.replicate(s)
            return replace(s, body=self.transform(s.body))
        if isinstance(s, AttrStmt):
            return replace(s, body=self.transform(s.body))
        return self.replicate(s)

    def replicate(self, s: Stmt) -> Stmt:
        if self.n <= MAX_UNROLL:
            copies = []
            for i in range(self.n):
                vt = const(i, self.var.dtype)
                c = fast_substitute(s, {self.var: const(i + self.min, self.var.dtype)})
                copies.append(_Retarget(self.expanded, vt).visit(c))
            return seq(*copies)
        v = Var(self.var.name + "_s", self.var.dtype)
        c = fast_substitute(s, {self.var: v + self.min if self.min else v})
        return For(v, const(0, v.dtype), const(self.n, v.dtype), ForKind.SERIAL,
                   _Retarget(self.expanded, v).visit(c))


class _VThreadPass(Mutator):
    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        node = self.generic(node)
        if node.kind is ForKind.THREAD_BINDING and is_vthread(node.thread_tag):
            out = _Injector(node).run()
            # keep pragmas placed on the vthread axis (unroll) for the passes that follow
            for key, value in reversed(node.annotations):
                out = AttrStmt(key, None, value, out)
            return out
        return node


def inject_virtual_threads(stmt: Stmt) -> Stmt:
    """Expand every vthread loop of ``stmt`` (innermost first)."""
    return _VThreadPass().visit(stmt)
