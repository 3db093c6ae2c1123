"""Loop-nest analysis of a lowered :class:`~templtune.lower.ir.PrimFunc` for the cost-model features.

One walk over the statement tree collects

* every loop (a ``For``; thread bindings and virtual threads are ``For`` of kind
  ``THREAD_BINDING``), with its constant extent, its depth and its annotation;
* every buffer access (``Load``/``Store``), with the chain of loops around it, the loop variables
  its flat index depends on, and the integer stride of each loop variable in that index;
* every floating-point add/sub, mul and div/mod, with the chain of loops around it.

:mod:`.itervar` and :mod:`.curve` turn this summary into feature vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templtune import dtype as dt
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Broadcast,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    SeqStmt,
    Store,
)
from templtune.te.expr import BinOp, BinOpKind, Cast, FloatImm, IntImm, PrimExpr, Var
from templtune.te.functor import children

# NOTE: the order of this table is the order of the 11-way one-hot in the itervar features.
ANNOTATIONS: tuple[str, ...] = (
    "blockIdx.x", "blockIdx.y", "blockIdx.z",
    "threadIdx.x", "threadIdx.y", "threadIdx.z",
    "unrolled", "vectorized", "parallel", "serial", "vthread",
)
_KIND_NAME = {
    ForKind.SERIAL: "serial",
    ForKind.PARALLEL: "parallel",
    ForKind.UNROLLED: "unrolled",
    ForKind.VECTORIZED: "vectorized",
}
# Annotations that split the iteration space among hardware threads.
PARALLEL_ANNOTATIONS = frozenset(ANNOTATIONS[:6]) | {"parallel", "vthread"}


@dataclass(eq=False, slots=True)
class LoopInfo:
    """One loop variable: ``extent`` (a constant upper bound), 1-based ``depth`` and
    ``topdown`` (product of the extents from the root down to and including this loop)."""

    var: Var
    extent: int
    depth: int
    annotation: str
    topdown: int


@dataclass(eq=False, slots=True)
class AccessInfo:
    """One buffer access named ``<buffer>_<k>`` (k-th access of that buffer in visiting order)."""

    name: str
    buffer: str
    scope: str
    is_store: bool
    loops: tuple[LoopInfo, ...]
    vars: frozenset[Var]
    strides: dict[Var, int] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class OpInfo:
    kind: str  # "add" | "mul" | "div"
    lanes: int
    loops: tuple[LoopInfo, ...]


@dataclass(eq=False, slots=True)
class LoopSummary:
    loops: list[LoopInfo]
    accesses: list[AccessInfo]
    ops: list[OpInfo]


def const_upper(e: PrimExpr) -> int | None:
    """A constant upper bound of ``e`` when one is evident (``IntImm``, constant arithmetic,
    ``min(x, c)``); ``None`` otherwise."""
    if isinstance(e, IntImm):
        return int(e.value)
    if isinstance(e, Cast):
        return const_upper(e.value)
    if isinstance(e, BinOp):
        a, b = const_upper(e.a), const_upper(e.b)
        if e.op is BinOpKind.MIN:
            cands = [x for x in (a, b) if x is not None]
            return min(cands) if cands else None
        if a is None or b is None:
            return None
        if e.op is BinOpKind.ADD:
            return a + b
        if e.op is BinOpKind.SUB:
            return a - b
        if e.op is BinOpKind.MUL:
            return a * b
        if e.op is BinOpKind.MAX:
            return max(a, b)
        if e.op in (BinOpKind.FLOORDIV, BinOpKind.DIV) and b != 0:
            return a // b
        if e.op is BinOpKind.FLOORMOD and b != 0:
            return a % b
    return None


def _vars_of(e: Any, lets: dict[Var, frozenset[Var]]) -> frozenset[Var]:
    out: set[Var] = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.add(n)
            out.update(lets.get(n, ()))
        else:
            stack.extend(children(n))
    return frozenset(out)


def linear_coeff(e: PrimExpr, v: Var, lets: dict[Var, PrimExpr]) -> int | None:
    """The integer coefficient of ``v`` in ``e`` when ``e`` is affine in ``v``; ``None`` when
    ``v`` enters non-linearly (division, modulo, products of variables, ...)."""
    if isinstance(e, Var):
        if e is v:
            return 1
        bound = lets.get(e)
        return 0 if bound is None else linear_coeff(bound, v, lets)
    if isinstance(e, (IntImm, FloatImm)):
        return 0
    if isinstance(e, (Cast,)):
        return linear_coeff(e.value, v, lets)
    if isinstance(e, Ramp):
        return linear_coeff(e.base, v, lets)
    if isinstance(e, Broadcast):
        return linear_coeff(e.value, v, lets)
    if isinstance(e, BinOp):
        ca, cb = linear_coeff(e.a, v, lets), linear_coeff(e.b, v, lets)
        if e.op is BinOpKind.ADD and ca is not None and cb is not None:
            return ca + cb
        if e.op is BinOpKind.SUB and ca is not None and cb is not None:
            return ca - cb
        if e.op is BinOpKind.MUL:
            if ca == 0 and cb == 0:
                return 0
            ka, kb = const_upper(e.a), const_upper(e.b)
            if ca is not None and kb is not None and cb == 0:
                return ca * kb
            if cb is not None and ka is not None and ca == 0:
                return cb * ka
            return None
        if ca == 0 and cb == 0:
            return 0
        return None
    # Any other node: linear only if ``v`` is absent.
    for c in children(e):
        if linear_coeff(c, v, lets) != 0:
            return None
    return 0


class _Walker:
    def __init__(self) -> None:
        self.loops: list[LoopInfo] = []
        self.by_var: dict[Var, LoopInfo] = {}
        self.accesses: list[AccessInfo] = []
        self.ops: list[OpInfo] = []
        self.stack: list[LoopInfo] = []
        self.let_vars: dict[Var, frozenset[Var]] = {}
        self.let_vals: dict[Var, PrimExpr] = {}
        self.access_ct: dict[str, int] = {}

    # ------------------------------------------------------------------ statements
    def stmt(self, s: Any) -> None:
        if isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            self.expr(s.index)
            self.expr(s.value)
            if s.predicate is not None:
                self.expr(s.predicate)
            self.access(s.buffer, s.index, True)
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, LetStmt):
            self.expr(s.value)
            self.let_vars[s.var] = _vars_of(s.value, self.let_vars)
            self.let_vals[s.var] = s.value
            self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            self.expr(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif isinstance(s, (Allocate, AttrStmt)):
            self.stmt(s.body)
        elif isinstance(s, Evaluate):
            self.expr(s.value)
        else:
            for c in children(s):
                if isinstance(c, PrimExpr):
                    self.expr(c)
                else:
                    self.stmt(c)

    def loop(self, s: For) -> None:
        info = self.by_var.get(s.loop_var)
        if info is None:
            extent = const_upper(s.extent)
            extent = max(1, extent) if extent is not None else 1
            if s.kind is ForKind.THREAD_BINDING:
                tag = s.thread_tag
                ann = "vthread" if tag.startswith("vthread") or tag == "cthread" else tag
                if ann not in ANNOTATIONS:
                    raise ValueError(f"feature extraction: unknown thread tag {tag!r}")
            else:
                ann = _KIND_NAME[s.kind]
            top = (self.stack[-1].topdown if self.stack else 1) * extent
            info = LoopInfo(s.loop_var, extent, len(self.stack) + 1, ann, top)
            self.by_var[s.loop_var] = info
            self.loops.append(info)
        # NOTE: a var bound by several nested loops (repeated vthread bindings) is merged into
        # its first occurrence and not pushed twice.
        pushed = not self.stack or all(x is not info for x in self.stack)
        if pushed:
            self.stack.append(info)
        self.stmt(s.body)
        if pushed:
            self.stack.pop()

    # ------------------------------------------------------------------ expressions
    def expr(self, e: Any) -> None:
        todo = [e]
        while todo:
            n = todo.pop()
            if isinstance(n, Load):
                self.expr(n.index)
                if n.predicate is not None:
                    self.expr(n.predicate)
                self.access(n.buffer, n.index, False)
                continue
            if isinstance(n, BinOp) and dt.is_float(dt.element_of(n.dtype)):
                kind = _OP_KIND.get(n.op)
                if kind is not None:
                    self.ops.append(OpInfo(kind, dt.lanes(n.dtype), tuple(self.stack)))
            todo.extend(reversed(list(children(n))))

    def access(self, buf: Any, index: PrimExpr, is_store: bool) -> None:
        k = self.access_ct.get(buf.name, 0)
        self.access_ct[buf.name] = k + 1
        loops = tuple(self.stack)
        vs = _vars_of(index, self.let_vars)
        strides: dict[Var, int] = {}
        for lp in loops:
            if lp.var in vs:
                c = linear_coeff(index, lp.var, self.let_vals)
                strides[lp.var] = c if c is not None else 0
        self.accesses.append(
            AccessInfo(f"{buf.name}_{k}", buf.name, buf.scope, is_store, loops, vs, strides))


_OP_KIND = {
    BinOpKind.ADD: "add", BinOpKind.SUB: "add", BinOpKind.MUL: "mul",
    BinOpKind.DIV: "div", BinOpKind.FLOORDIV: "div", BinOpKind.FLOORMOD: "div",
}


def summarize(func: PrimFunc) -> LoopSummary:
    """Walk ``func`` once and return its loops (first-occurrence order), accesses and float ops."""
    w = _Walker()
    w.stmt(func.body)
    return LoopSummary(w.loops, w.accesses, w.ops)
