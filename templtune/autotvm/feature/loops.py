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
from templtune.te.expr import (
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
)
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


_KIDS: dict[type, Any] = {
    BinOp: lambda n: (n.a, n.b),
    Var: lambda n: (),
    IntImm: lambda n: (),
    FloatImm: lambda n: (),
    Cast: lambda n: (n.value,),
    Broadcast: lambda n: (n.value,),
    Ramp: lambda n: (n.base, n.stride),
    Not: lambda n: (n.a,),
    Select: lambda n: (n.cond, n.true_value, n.false_value),
    Call: lambda n: n.args,
    Load: lambda n: (n.index,) if n.predicate is None else (n.index, n.predicate),
}


def kids(n: Any) -> tuple[Any, ...]:
    """Children of an expression node (fast paths for the common node types)."""
    f = _KIDS.get(type(n))
    return f(n) if f is not None else tuple(children(n))


Form = tuple[dict[Var, int], frozenset[Var]]
_EMPTY: Form = ({}, frozenset())


def linear_form(e: Any, lets: dict[Var, Form]) -> Form:
    """``(coefficients, nonlinear)``: the integer coefficient of every variable that enters
    ``e`` linearly, and the set of variables that enter non-linearly (division, modulo,
    products of variables, calls, ...). Let-bound variables are replaced by their forms."""
    t = type(e)
    if t is Var:
        f = lets.get(e)
        return f if f is not None else ({e: 1}, frozenset())
    if t is IntImm or t is FloatImm:
        return _EMPTY
    if t is Cast or t is Broadcast:
        return linear_form(e.value, lets)
    if t is Ramp:
        return linear_form(e.base, lets)
    if t is BinOp:
        (ca, na), (cb, nb) = linear_form(e.a, lets), linear_form(e.b, lets)
        if e.op is BinOpKind.ADD or e.op is BinOpKind.SUB:
            sign = 1 if e.op is BinOpKind.ADD else -1
            out = dict(ca)
            for v, c in cb.items():
                out[v] = out.get(v, 0) + sign * c
            return out, na | nb
        if e.op is BinOpKind.MUL:
            if not ca and not na:
                k = const_upper(e.a)
                if k is not None:
                    return {v: c * k for v, c in cb.items()}, nb
            if not cb and not nb:
                k = const_upper(e.b)
                if k is not None:
                    return {v: c * k for v, c in ca.items()}, na
        return {}, na | nb | frozenset(ca) | frozenset(cb)
    allv: set[Var] = set()
    for c in kids(e):
        cf, nf = linear_form(c, lets)
        allv.update(cf)
        allv.update(nf)
    return ({}, frozenset(allv)) if allv else _EMPTY


def linear_coeff(e: PrimExpr, v: Var, lets: dict[Var, Form] | None = None) -> int | None:
    """The integer coefficient of ``v`` in ``e`` when ``e`` is affine in ``v``; ``None`` when
    ``v`` enters non-linearly."""
    coeffs, nonlinear = linear_form(e, lets or {})
    return None if v in nonlinear else coeffs.get(v, 0)


class _Walker:
    def __init__(self) -> None:
        self.loops: list[LoopInfo] = []
        self.by_var: dict[Var, LoopInfo] = {}
        self.accesses: list[AccessInfo] = []
        self.ops: list[OpInfo] = []
        self.stack: list[LoopInfo] = []
        self.let_forms: dict[Var, Form] = {}
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
            self.let_forms[s.var] = linear_form(s.value, self.let_forms)
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
            todo.extend(reversed(kids(n)))

    def access(self, buf: Any, index: PrimExpr, is_store: bool) -> None:
        k = self.access_ct.get(buf.name, 0)
        self.access_ct[buf.name] = k + 1
        loops = tuple(self.stack)
        coeffs, nonlinear = linear_form(index, self.let_forms)
        vs = frozenset(v for v, c in coeffs.items() if c != 0) | nonlinear
        # NOTE: a variable entering non-linearly has no single stride; it counts as touched
        # (count/reuse) with stride 0.
        strides = {lp.var: (0 if lp.var in nonlinear else coeffs[lp.var])
                   for lp in loops if lp.var in vs}
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
