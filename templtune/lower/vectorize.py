"""Loop-IR vectorization: :func:`vectorize_loops` turns a ``VECTORIZED`` loop with a
straight-line body (stores only) into vector code.

The loop variable becomes ``ramp(0, 1, n)``, loads and stores whose index is affine in it
become ``Ramp``-indexed vector accesses, loop-invariant scalars are broadcast, and a load whose
lanes read constant offsets within ``n`` elements becomes a window (one contiguous load, masked
past its span, and a ``Shuffle``) where it would have to gather. A body it cannot vectorize
(inner loops, guards, non-affine indices) stays a serial loop, except one holding an
``UNROLLED`` loop: that loop stays ``VECTORIZED`` for LLVM's loop vectorizer, which turns the
unrolled strided accesses (a layout transform's channel lanes) into interleaved groups
(contiguous vectors and shuffles) where a ``Ramp`` would gather. A loop over a reduction axis
(``Stage.vectorize_reduction``) whose whole body is ``x = x op e`` becomes a tree of halving
``Shuffle``s (:meth:`_Vectorizer.reduction`).
"""


from __future__ import annotations

from typing import Any

from templtune import dtype as dt
from templtune.lower.ir import (
    Broadcast,
    For,
    ForKind,
    Load,
    Ramp,
    SeqStmt,
    Shuffle,
    Stmt,
    Store,
)
from templtune.lower.passes import _SubstOne
from templtune.te.expr import (
    COMPARE_OPS,
    LOGIC_OPS,
    BinOp,
    BinOpKind,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Select,
    Var,
    const,
    const_int,
)
from templtune.te.functor import Mutator, _replace, children, handles, post_order
from templtune.te.simplify import Simplifier

_REDUCE_OPS = frozenset({BinOpKind.ADD, BinOpKind.MUL, BinOpKind.MIN, BinOpKind.MAX})
_PURE_CALLS = frozenset({"exp", "log", "sqrt", "tanh", "sigmoid", "fabs", "abs", "floor", "ceil",
                         "pow", "power", "erf", "exp2", "log2", "log10", "round", "trunc"})


class _Fail(Exception):
    pass


def _speculable(e: PrimExpr, lanes: int) -> bool:
    """True when a lane-wise guarded branch ``e`` can be rendered with masked loads: its
    loads read buffers of constant size (at least ``lanes`` elements) and it divides integers
    by constants only (the LLVM renderer's condition for a vector ``if_then_else``)."""
    stack: list[Any] = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            size = n.buffer.const_size
            if size is None or size < lanes or n.predicate is not None:
                return False
        elif isinstance(n, BinOp) and not dt.is_float(n.dtype) and not isinstance(n.b, IntImm) \
                and n.op.name in ("DIV", "FLOORDIV", "FLOORMOD", "MOD"):
            return False
        stack.extend(c for c in children(n) if isinstance(c, PrimExpr))
    return True


class _Vectorizer:
    def __init__(self, var: Var, lanes: int, simp: Simplifier) -> None:
        self.v, self.n, self.simp = var, lanes, simp
        self.sub = _SubstOne(var)  # remembers which nodes use the loop variable
        self._index: dict[PrimExpr, PrimExpr | None] = {}
        self.windows = True  # whether a load may read a window (see window)

    def uses(self, e: PrimExpr) -> bool:
        return self.sub.uses(e)

    def bcast(self, e: PrimExpr) -> PrimExpr:
        return e if dt.lanes(e.dtype) == self.n else Broadcast(e, self.n)

    def index(self, e: PrimExpr) -> PrimExpr:
        # NOTE: a reduction's store and its read-back load share one index node: vectorize
        # it once (None remembers a failure)
        if e in self._index:
            r = self._index[e]
            if r is None:
                raise _Fail
            return r
        self._index[e] = None
        r = self._index[e] = self._index_of(e)
        return r

    def _index_of(self, e: PrimExpr) -> PrimExpr:
        if not self.uses(e):
            return e
        s = self.simp
        e0 = s.visit(self.sub.subst(e, const(0, self.v.dtype)))
        e1 = s.visit(self.sub.subst(e, const(1, self.v.dtype)))
        c = const_int(s.visit(e1 - e0))
        if c is None:
            raise _Fail
        check = s.visit(e - (e0 + self.v * c)) if c != 0 else s.visit(e - e0)
        if const_int(check) != 0:
            raise _Fail
        if c == 0:
            return e0
        return Ramp(e0, const(c, e.dtype), self.n)

    def window(self, e: Load) -> PrimExpr:
        """``e`` (an index not affine in the lanes) as a :class:`Shuffle` of one contiguous
        load, where each lane reads a constant offset from lane 0's element and the offsets
        span at most ``n`` elements (lanes that repeat an element per group, or permute a
        window). Lanes past the span are masked off: every element the load reads lies
        between two that the lanes read, so it stays inside the buffer."""
        if not self.windows:
            raise _Fail
        s, zero = self.simp, const(0, self.v.dtype)
        base = s.visit(self.sub.subst(e.index, zero))
        offsets = []
        for k in range(self.n):
            off = const_int(s.visit(self.sub.subst(e.index, const(k, self.v.dtype)) - base))
            if off is None:
                raise _Fail
            offsets.append(off)
        lo, span = min(offsets), max(offsets) - min(offsets) + 1
        if span > self.n:
            raise _Fail
        itype = e.index.dtype
        lanes = Ramp(const(0, itype), const(1, itype), self.n)
        pred = None if span == self.n else BinOp(
            BinOpKind.LT, lanes, Broadcast(const(span, itype), self.n),
            dt.with_lanes("bool", self.n))
        start = s.visit(base + lo) if lo else base
        load = Load(e.buffer, Ramp(start, const(1, itype), self.n), pred)
        return Shuffle(load, tuple(o - lo for o in offsets))

    def expr(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, (IntImm, FloatImm)) or not self.uses(e):
            return e
        if dt.is_int(e.dtype) and dt.lanes(e.dtype) == 1 and not isinstance(e, Load):
            try:
                return self.index(e)
            except _Fail:
                pass
        if isinstance(e, Load):
            if e.predicate is not None:
                raise _Fail
            try:
                idx = self.index(e.index)
            except _Fail:
                return self.window(e)
            return Load(e.buffer, idx) if idx is not e.index else e
        if isinstance(e, BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            a, b = self.bcast(a), self.bcast(b)
            if e.op in COMPARE_OPS or e.op in LOGIC_OPS:
                return BinOp(e.op, a, b, dt.with_lanes("bool", self.n))
            return BinOp(e.op, a, b, dt.with_lanes(e.dtype, self.n))
        if isinstance(e, Cast):
            return Cast(dt.with_lanes(e.dtype, self.n), self.bcast(self.expr(e.value)))
        if isinstance(e, Not):
            return Not(self.bcast(self.expr(e.a)), dt.with_lanes("bool", self.n))
        if isinstance(e, Select):
            lanewise = e.guarded and self.uses(e.cond)
            if lanewise and not (
                    _speculable(e.true_value, self.n) and _speculable(e.false_value, self.n)):
                raise _Fail
            # NOTE: a lane-wise guard masks its branches' loads by output lane, which says
            # nothing about a window's lanes: no windows there
            outer, self.windows = self.windows, self.windows and not lanewise
            try:
                return Select(self.bcast(self.expr(e.cond)), self.bcast(self.expr(e.true_value)),
                              self.bcast(self.expr(e.false_value)), e.guarded)
            finally:
                self.windows = outer
        if isinstance(e, Call) and e.name in _PURE_CALLS:
            args = tuple(self.bcast(self.expr(a)) for a in e.args)
            return Call(dt.with_lanes(e.dtype, self.n), e.name, args)
        raise _Fail

    def stmt(self, s: Stmt, alone: bool = True) -> Stmt:
        """``s`` over the lanes; ``alone``: it is the loop's whole body."""
        if isinstance(s, SeqStmt):
            return SeqStmt(tuple(self.stmt(x, False) for x in s.seq))
        if isinstance(s, Store):
            if s.predicate is not None:
                raise _Fail
            idx = self.index(s.index)
            if dt.lanes(idx.dtype) == 1:
                # NOTE: only as the whole body: a statement beside it could read the value
                # between iterations (a running sum), which the tree never holds
                if not alone:
                    raise _Fail
                return self.reduction(s)
            val = self.bcast(self.expr(s.value))
            return Store(s.buffer, idx, val)
        raise _Fail

    def reduction(self, s: Store) -> Stmt:
        """``s``, a store every lane would make to one place, as a reduction across the lanes
        where it is one: ``x = x op e`` (op a sum, product, min or max; ``e`` read through the
        lanes) becomes ``x = x op tree(e)``, the lanes combined in halves by shuffles: log2(n)
        dependent steps instead of n, an order reassociated as rfactor's is."""
        v = s.value
        if not (isinstance(v, BinOp) and v.op in _REDUCE_OPS and self.n & (self.n - 1) == 0
                and isinstance(v.a, Load) and v.a.buffer is s.buffer and v.a.predicate is None
                and not self.uses(v.a)
                and const_int(self.simp.visit(v.a.index - s.index)) == 0
                and not any(isinstance(n, Load) and n.buffer is s.buffer
                            for n in post_order(v.b))):
            raise _Fail  # every lane would store to the same place
        acc = self.bcast(self.expr(v.b))
        elem = dt.element_of(acc.dtype)
        for half in (self.n >> k for k in range(1, self.n.bit_length())):
            acc = BinOp(v.op, Shuffle(acc, tuple(range(half))),
                        Shuffle(acc, tuple(range(half, 2 * half))), dt.with_lanes(elem, half))
        return Store(s.buffer, s.index, BinOp(v.op, v.a, acc, v.dtype))


def _holds_unrolled(s: Stmt) -> bool:
    """Whether ``s`` is or holds an ``UNROLLED`` loop."""
    if isinstance(s, For) and s.kind is ForKind.UNROLLED:
        return True
    return any(_holds_unrolled(c) for c in children(s) if isinstance(c, Stmt))


class _VectorizePass(Mutator):
    def __init__(self) -> None:
        self.simp = Simplifier()

    def visit(self, node: Any) -> Any:
        # NOTE: vectorized loops are statements: expressions are returned as they are (the
        # generic walk rebuilt nothing there but visited every node of every index)
        if isinstance(node, PrimExpr):
            return node
        return super().visit(node)

    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        body = self.visit(node.body)
        if node.kind is ForKind.VECTORIZED:
            n = const_int(node.extent)
            if n is not None and const_int(node.min) == 0 and n > 1:
                try:
                    return _Vectorizer(node.loop_var, n, self.simp).stmt(body)
                except _Fail:
                    pass
            if _holds_unrolled(body):
                return _replace(node, {"body": body})
            return _replace(node, {"body": body, "kind": ForKind.SERIAL})
        return node if body is node.body else _replace(node, {"body": body})


def vectorize_loops(s: Stmt) -> Stmt:
    """Vectorize every ``VECTORIZED`` loop that can be (see module docstring)."""
    return _VectorizePass().visit(s)
