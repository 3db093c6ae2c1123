"""Cross-thread reduction: turn an accumulation across a ``threadIdx`` loop into an all-reduce.

Binding a reduce axis to a thread (typically after ``rfactor``) lowers to a ``threadIdx`` loop
whose body accumulates into one element for every thread::

    for tx in threadIdx.x(32):          # THREAD_BINDING
        B.rf[0] = ...                   # per-thread partial (local, allocated in the loop)
        B[bx] = B[bx] + B.rf[0]         # same element for every tx: a race on a GPU

This pass (run on the loop IR before the kernel split, while binding loops still exist)
recognises such a ``Store`` -- inside a ``threadIdx`` loop, into a buffer not allocated in that
loop, at an index that does not depend on the loop's thread, of ``X[i] op e`` with ``op`` one of
``+ * min max`` and ``e`` depending on the thread -- and rewrites it into::

    red_buf[slot] = e                   # one shared slot per thread of the block
    __syncthreads()
    if tx < n - p: red_buf[slot] = red_buf[slot] op red_buf[slot + p]     # p: 2^k < n
    __syncthreads()
    ... halving p down to 1 ...
    if tx == 0: X[i] = X[i] op red_buf[slot - tx]   # every thread when X is per-thread (local)

which is race-free for any extent (power of two or not). Serial loops around such a thread loop
(``for ko: for tx: X[i] op= e``, the form of a reduce axis split and bound without rfactor) are
first turned into a per-thread partial (``for tx: acc = id; for ko: acc op= e; X[i] op= acc``),
so the tree runs once per reduction rather than once per serial iteration. ``slot`` is ``tx`` plus the other
enclosing ``threadIdx`` variables times their strides, so independent reductions of different
``threadIdx.y`` rows do not share slots. A guarded accumulation ``if c: X[i] = X[i] op e``
becomes ``X[i] = X[i] op (c ? e : identity)`` so the barriers are reached by every thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import accessed_buffers, free_vars, iter_nodes
from templtune.codegen.cuda.sync import barrier
from templtune.lower.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Load,
    Stmt,
    Store,
    seq,
)
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    FloatImm,
    IntImm,
    PrimExpr,
    Select,
    Var,
    binary,
    const_int,
)
from templtune.te.functor import Mutator, handles, structural_equal

_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
_OPS = (BinOpKind.ADD, BinOpKind.MUL, BinOpKind.MIN, BinOpKind.MAX)


@dataclass(frozen=True, slots=True)
class _Thread:
    var: Var
    extent: int
    tag: str


def _identity(op: BinOpKind, dtype: str) -> PrimExpr:
    if op is BinOpKind.ADD:
        v: float = 0
    elif op is BinOpKind.MUL:
        v = 1
    elif dt.is_float(dtype):
        v = float("-inf") if op is BinOpKind.MAX else float("inf")
    else:
        bits = 8 * dt.itemsize(dtype)
        v = -(1 << (bits - 1)) if op is BinOpKind.MAX else (1 << (bits - 1)) - 1
    return FloatImm(dtype, float(v)) if dt.is_float(dtype) else IntImm(dtype, int(v))


def _split_accumulation(s: Store) -> tuple[BinOpKind, PrimExpr] | None:
    """``X[i] = X[i] op e`` (or ``e op X[i]``) -> ``(op, e)``; None otherwise."""
    v = s.value
    if not isinstance(v, BinOp) or v.op not in _OPS or dt.lanes(s.index.dtype) != 1:
        return None

    def is_self(x: PrimExpr) -> bool:
        return (isinstance(x, Load) and x.buffer is s.buffer and x.predicate is None
                and structural_equal(x.index, s.index))

    if is_self(v.a):
        return v.op, v.b
    if is_self(v.b):
        return v.op, v.a
    return None


class _Rewriter(Mutator):
    def __init__(self) -> None:
        self.threads: list[_Thread] = []
        self.inner_bufs: list[set[Buffer]] = []   # buffers allocated inside each thread loop
        self.count = 0
        self.n_local = 0

    # -- scope tracking -------------------------------------------------------------------
    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        ext = const_int(node.extent)
        if (node.kind is ForKind.THREAD_BINDING and node.thread_tag in _THREAD_TAGS
                and ext is not None and const_int(node.min) == 0):
            self.threads.append(_Thread(node.loop_var, ext, node.thread_tag))
            self.inner_bufs.append(set())
            try:
                body = self.visit(node.body)
            finally:
                self.threads.pop()
                self.inner_bufs.pop()
            return node if body is node.body else replace(node, body=body)
        if node.kind in (ForKind.SERIAL, ForKind.UNROLLED):
            swapped = _interchange(node, self.n_local)
            if swapped is not None:
                self.n_local += 1
                return self.visit(swapped)
        return self.generic(node)

    @handles(Allocate)
    def visit_Allocate(self, node: Allocate) -> Stmt:
        if self.inner_bufs:
            self.inner_bufs[-1].add(node.buffer)
        return self.generic(node)

    # -- the pattern ----------------------------------------------------------------------
    def _reduce_thread(self, s: Store, e: PrimExpr) -> _Thread | None:
        """The innermost enclosing thread loop the store reduces over, if any."""
        idx_vars = free_vars(s.index)
        e_vars = free_vars(e)
        e_bufs = accessed_buffers(e)
        for depth in range(len(self.threads) - 1, -1, -1):
            t = self.threads[depth]
            if t.extent <= 1 or t.var in idx_vars:
                continue
            inner: set[Buffer] = set().union(*self.inner_bufs[depth:])
            if s.buffer in inner or accessed_buffers(s.index) & inner:
                return None
            if t.var in e_vars or (e_bufs & inner):
                return t
        return None

    @handles(IfThenElse)
    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        if self.threads:
            found = _accumulation(node)
            if found is not None:
                s, op, guarded = found
                t = self._reduce_thread(s, guarded)
                if t is not None:
                    return self._allreduce(s, op, guarded, t)
        return self.generic(node)

    @handles(Store)
    def visit_Store(self, node: Store) -> Stmt:
        if not self.threads or node.predicate is not None:
            return node
        acc = _split_accumulation(node)
        if acc is None:
            return node
        t = self._reduce_thread(node, acc[1])
        return node if t is None else self._allreduce(node, acc[0], acc[1], t)

    def _allreduce(self, s: Store, op: BinOpKind, e: PrimExpr, t: _Thread) -> Stmt:
        # NOTE: slots are laid out with the reducing thread fastest, then the other enclosing
        # thread loops, so each independent reduction owns a contiguous run of ``t.extent``.
        others = [u for u in self.threads if u is not t]
        size = t.extent
        slot: PrimExpr = t.var
        for u in others:
            slot = slot + u.var * size
            size *= u.extent
        self.count += 1
        buf = Buffer(f"red_buf{self.count - 1}", (IntImm("int32", size),), s.buffer.dtype,
                     "shared")
        body: list[Stmt] = [Store(buf, slot, e), barrier()]
        n = t.extent
        p = 1
        while p * 2 < n:
            p *= 2
        active = n - p      # first step folds the tail [p, n) onto [0, n - p)
        while p >= 1:
            upd = Store(buf, slot, binary(op, Load(buf, slot), Load(buf, slot + p)))
            body.append(IfThenElse(t.var < active, upd))
            body.append(barrier())
            p //= 2
            active = p
        base = slot - t.var if others else IntImm("int32", 0)
        final = Store(s.buffer, s.index, binary(op, Load(s.buffer, s.index), Load(buf, base)))
        if s.buffer.scope == "local":
            # NOTE: every thread keeps its own copy: all read the total; the barrier keeps a
            # later reuse of the slots (a surrounding loop) from overwriting it before it is read.
            body += [final, barrier()]
        else:
            body.append(IfThenElse(binary(BinOpKind.EQ, t.var, 0), final))
        return Allocate(buf, seq(*body))


def _accumulation(s: Stmt) -> tuple[Store, BinOpKind, PrimExpr] | None:
    """``X[i] = X[i] op e`` or ``if c1: if c2..: X[i] = X[i] op e`` -> (store, op, e or
    c1 && c2.. ? e : id). Nested guards (a split's tail check around a pool's window check)
    fold into one, so no barrier of the all-reduce ends up under a thread-dependent ``if``."""
    conds: list[PrimExpr] = []
    while isinstance(s, IfThenElse) and s.else_case is None:
        conds.append(s.condition)
        s = s.then_case
    if conds:
        if not isinstance(s, Store) or s.predicate is not None:
            return None
        acc = _split_accumulation(s)
        if acc is None:
            return None
        op, e = acc
        cond = conds[0]
        for c in conds[1:]:
            cond = binary(BinOpKind.AND, cond, c)
        return s, op, Select(cond, e, _identity(op, s.buffer.dtype), True)
    if isinstance(s, Store) and s.predicate is None:
        acc = _split_accumulation(s)
        return None if acc is None else (s, acc[0], acc[1])
    return None


def _interchange(node: For, n: int) -> Stmt | None:
    """``for r..: for tx (threadIdx): X[i] op= e`` (``i`` free of ``r`` and ``tx``) ->
    ``for tx: {acc = id; for r..: acc op= e; X[i] op= acc}``: one all-reduce of per-thread
    partials instead of one per iteration of the serial reduction loops."""
    loops: list[For] = []
    cur: Stmt = node
    while isinstance(cur, For) and cur.kind in (ForKind.SERIAL, ForKind.UNROLLED):
        loops.append(cur)
        cur = cur.body
    if not (isinstance(cur, For) and cur.kind is ForKind.THREAD_BINDING
            and cur.thread_tag in _THREAD_TAGS):
        return None
    found = _accumulation(cur.body)
    if found is None:
        return None
    store, op, e = found
    serial_vars = {lp.loop_var for lp in loops}
    idx_vars = free_vars(store.index)
    if idx_vars & serial_vars or cur.loop_var in idx_vars or store.buffer in accessed_buffers(e):
        return None
    if any(free_vars(lp.min) & serial_vars or free_vars(lp.extent) & serial_vars
           or cur.loop_var in free_vars(lp.extent) for lp in loops):
        return None
    acc = Buffer(f"red_local{n}", (IntImm("int32", 1),), store.buffer.dtype,
                 "local")
    zero = IntImm("int32", 0)
    inner: Stmt = Store(acc, zero, binary(op, Load(acc, zero), e))
    for lp in reversed(loops):
        inner = replace(lp, body=inner)
    final = Store(store.buffer, store.index, binary(op, Load(store.buffer, store.index),
                                                   Load(acc, zero)))
    body = Allocate(acc, seq(Store(acc, zero, _identity(op, store.buffer.dtype)), inner, final))
    return replace(cur, body=body)


def lower_cross_thread_reduction(body: Stmt) -> Stmt:
    """Rewrite accumulations across ``threadIdx`` loops into shared-memory tree all-reduces
    (see the module docstring); other statements are returned unchanged."""
    if not any(isinstance(n, For) and n.kind is ForKind.THREAD_BINDING
               and n.thread_tag in _THREAD_TAGS for n in iter_nodes(body)):
        return body
    return _Rewriter().visit(body)


__all__ = ["lower_cross_thread_reduction"]
