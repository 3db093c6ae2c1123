"""One walk over a lowered loop nest that collects what the per-store features need.

For every ``Store`` statement (in program order) :func:`walk` records

* the loops around it, outermost first, with their constant extent, kind (``"serial"``,
  ``"parallel"``, ``"vectorized"``, ``"unrolled"`` or a thread tag) and their
  ``pragma_auto_unroll_max_step``;
* its static operation counts by category (:data:`OP_NAMES`; vector lanes included) over the
  stored value, the index and the predicate;
* its buffer accesses (the write and every ``Load``), each index decomposed into an *affine form
  over atoms*: an atom ``(v, d, m)`` stands for ``floormod(floordiv(v, d), m)`` (``m == 0``: no
  modulo), so the ``floordiv``/``floormod`` that fused loops leave in indices stay analysable;
  variables entering any other way are kept as a non-linear set;
* where the stored buffer was allocated (number of loops around its ``Allocate``).

:mod:`.feature` turns these records into vectors.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from templtune import dtype as dt
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Broadcast,
    Buffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    Ramp,
    SeqStmt,
    Store,
)
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
    Select,
    Var,
)
from templtune.te.functor import children

#: Operation categories counted per store (the compute group of the feature vector).
OP_NAMES: tuple[str, ...] = (
    "float_addsub", "float_mul", "float_divmod", "float_cmp", "float_mathfunc",
    "float_otherfunc", "int_addsub", "int_mul", "int_divmod", "int_cmp", "int_otherfunc",
    "bool_op", "select_op",
)
_OP = {n: k for k, n in enumerate(OP_NAMES)}
_ARITH = {BinOpKind.ADD: "addsub", BinOpKind.SUB: "addsub", BinOpKind.MUL: "mul",
          BinOpKind.DIV: "divmod", BinOpKind.FLOORDIV: "divmod", BinOpKind.FLOORMOD: "divmod",
          BinOpKind.MIN: "cmp", BinOpKind.MAX: "cmp"}
_MATH = frozenset({"exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
                   "tanh", "sigmoid", "pow", "erf", "sin", "cos", "tan", "atan", "fabs",
                   "floor", "ceil", "round", "trunc", "fma"})
_NO_COST_CALLS = frozenset({"likely", "tvm_storage_sync"})
_KIND = {ForKind.SERIAL: "serial", ForKind.PARALLEL: "parallel",
         ForKind.VECTORIZED: "vectorized", ForKind.UNROLLED: "unrolled"}

Atom = tuple[Var, int, int]


@dataclass(frozen=True, slots=True, eq=False)
class Loop:
    """A loop around a store: ``extent`` is its constant trip count (fractional when an
    ``if (likely(...))`` guard skips some iterations, see ``_Walker.narrow``),
    ``auto_unroll`` the loop's auto-unroll pragma (0: none)."""

    var: Var
    extent: float
    kind: str
    auto_unroll: int
    declared: int  # the extent the loop was written with (a thread binding's launch extent)


@dataclass(frozen=True, slots=True, eq=False)
class Access:
    """One access of a store statement: ``coeffs`` maps atoms to their integer coefficient in
    the flat index; ``nonlinear`` holds variables that enter it otherwise."""

    buffer: Buffer
    is_write: bool
    coeffs: tuple[tuple[Atom, int], ...]
    nonlinear: frozenset[Var]


@dataclass(frozen=True, slots=True, eq=False)
class StoreInfo:
    """Everything the features of one store statement are computed from."""

    buffer: Buffer
    loops: tuple[Loop, ...]
    ops: tuple[int, ...]
    accesses: tuple[Access, ...]
    alloc_depth: int  # loops around the buffer's Allocate; -1 for a function parameter


@functools.lru_cache(maxsize=256)
def _dtype_info(dtype: str) -> tuple[str, int]:
    """``("float" | "int" | "bool" | "other", lanes)``."""
    el = dt.element_of(dtype)
    cls = ("bool" if dt.is_bool(el) else "float" if dt.is_float(el)
           else "int" if dt.is_int(el) else "other")
    return cls, dt.lanes(dtype)


def _int_value(e: Any) -> int | None:
    return int(e.value) if isinstance(e, IntImm) else None


# ----------------------------------------------------------------------------- affine forms
Form = tuple[dict[Atom, int], int, frozenset[Var]]
_ZERO: Form = ({}, 0, frozenset())


def _vars_of(e: Any, lets: dict[Var, Form]) -> frozenset[Var]:
    out: set[Var] = set()
    todo = [e]
    while todo:
        n = todo.pop()
        if isinstance(n, Var):
            f = lets.get(n)
            if f is None:
                out.add(n)
            else:
                out.update(a[0] for a in f[0])
                out.update(f[2])
        else:
            todo.extend(children(n))
    return frozenset(out)


def _nonlinear(f: Form) -> Form:
    return {}, 0, frozenset(a[0] for a in f[0]) | f[2]


def _div_mod(f: Form, c: int, is_div: bool) -> Form:
    coeffs, k, nl = f
    if len(coeffs) == 1 and not nl:
        ((v, d, m), co), = coeffs.items()
        if co == 1 and 0 <= k < c:
            # NOTE: a constant offset below the divisor is dropped (it shifts, not widens, the
            # touched range); exact when it is 0, which is what fused loops produce.
            if is_div and (m == 0 or m % c == 0):
                return {(v, d * c, m // c if m else 0): 1}, 0, frozenset()
            if not is_div and (m == 0 or m % c == 0):
                return {(v, d, c): 1}, 0, frozenset()
    if is_div and all(co % c == 0 for co in coeffs.values()) and k % c == 0:
        return {a: co // c for a, co in coeffs.items()}, k // c, nl
    return _nonlinear(f)


def affine(e: Any, lets: dict[Var, Form]) -> Form:
    """``(coefficients by atom, constant, non-linear variables)`` of an integer index."""
    t = type(e)
    if t is Var:
        f = lets.get(e)
        return f if f is not None else ({(e, 1, 0): 1}, 0, frozenset())
    if t is IntImm:
        return {}, int(e.value), frozenset()
    if t is Cast or t is Broadcast:
        return affine(e.value, lets)
    if t is Ramp:
        return affine(e.base, lets)
    if t is BinOp:
        op = e.op
        if op is BinOpKind.ADD or op is BinOpKind.SUB:
            (ca, ka, na), (cb, kb, nb) = affine(e.a, lets), affine(e.b, lets)
            sign = 1 if op is BinOpKind.ADD else -1
            out = dict(ca)
            for a, c in cb.items():
                out[a] = out.get(a, 0) + sign * c
            return {a: c for a, c in out.items() if c}, ka + sign * kb, na | nb
        if op is BinOpKind.MUL:
            fa, fb = affine(e.a, lets), affine(e.b, lets)
            if not fa[0] and not fa[2]:
                fa, fb = fb, fa
            if not fb[0] and not fb[2]:
                k = fb[1]
                return ({a: c * k for a, c in fa[0].items() if c * k}, fa[1] * k,
                        fa[2] if k else frozenset())
            return {}, 0, _vars_of(e, lets)
        if op is BinOpKind.FLOORDIV or op is BinOpKind.FLOORMOD:
            div = _int_value(e.b)
            if div is not None and div > 0:
                return _div_mod(affine(e.a, lets), div, op is BinOpKind.FLOORDIV)
    return ({}, 0, _vars_of(e, lets)) if not isinstance(e, (IntImm, FloatImm)) else _ZERO


# ----------------------------------------------------------------------------- the walk
class _Walker:
    def __init__(self) -> None:
        self.stack: list[Loop] = []
        self.lets: dict[Var, Form] = {}
        self.alloc_depth: dict[Buffer, int] = {}
        self.stores: list[StoreInfo] = []
        self.pending = [0] * len(OP_NAMES)  # ops of let values, charged to the next store

    def stmt(self, s: Any) -> None:
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                self.stmt(x)
        elif t is For:
            self.loop(s)
        elif t is Store:
            self.store(s)
        elif t is IfThenElse:
            self.if_then_else(s)
        elif t is Allocate:
            self.alloc_depth[s.buffer] = len(self.stack)
            self.stmt(s.body)
        elif t is LetStmt:
            self.count(s.value, self.pending)
            self.lets[s.var] = affine(s.value, self.lets)
            self.stmt(s.body)
        elif t is AttrStmt:
            self.stmt(s.body)
        elif t is Evaluate:
            pass
        else:
            raise TypeError(f"per-store features: unexpected statement {t.__name__}")

    def loop(self, s: For) -> None:
        ext = _int_value(s.extent)
        if ext is None:
            raise ValueError(f"per-store features: loop {s.loop_var.name} has a non-constant "
                             f"extent {s.extent}")
        if s.kind is ForKind.THREAD_BINDING:
            tag = s.thread_tag
            kind = "vthread" if tag.startswith("vthread") or tag == "cthread" else tag
        else:
            kind = _KIND[s.kind]
        unroll = 0
        for k, v in s.annotations:
            if k == "pragma_auto_unroll_max_step":
                unroll = int(v)
        saved = list(self.stack)
        if s.kind is ForKind.THREAD_BINDING:
            # NOTE: a nested binding of a tag already bound (a cooperative fetch inside the
            # kernel's thread loop) runs on the same threads: the outer one counts once.
            for pos, lp in enumerate(self.stack):
                if lp.kind == kind:
                    self.stack[pos] = Loop(lp.var, 1, lp.kind, lp.auto_unroll, lp.declared)
        self.stack.append(Loop(s.loop_var, max(ext, 1), kind, unroll, max(ext, 1)))
        self.stmt(s.body)
        self.stack[:] = saved

    def if_then_else(self, s: IfThenElse) -> None:
        cond = s.condition
        if isinstance(cond, Call) and cond.name == "likely" and cond.args:
            cond = cond.args[0]
        saved = list(self.stack)
        for c in _conjuncts(cond):
            if isinstance(c, BinOp) and c.op is BinOpKind.LT:
                self.narrow(c.a, c.b)
        self.count(s.condition, self.pending)
        self.stmt(s.then_case)
        self.stack[:] = saved
        if s.else_case is not None:
            self.stmt(s.else_case)

    def narrow(self, lhs: Any, rhs: Any) -> None:
        """Scale the loops of ``if (likely(lhs < rhs))`` by the fraction of iterations kept.

        NOTE: a non-dividing split guards ``outer * f + inner < extent``; when the guarded
        loops enumerate ``lhs`` densely (mixed radix) exactly ``rhs - const`` points pass, so
        the outermost of them runs a fractional trip count (op counts and bytes stay honest).
        """
        bound = _int_value(rhs)
        coeffs, k, nl = affine(lhs, self.lets)
        if bound is None or nl or not coeffs:
            return
        pos = {lp.var: j for j, lp in enumerate(self.stack)}
        terms = []
        for (v, d, m), c in coeffs.items():
            if v not in pos or d != 1 or m or c <= 0:
                return
            terms.append((pos[v], c))
        exts = [self.stack[j].extent for j, _ in terms]
        total = math.prod(exts)
        if sum(c * (e - 1) for (_, c), e in zip(terms, exts)) + 1 != total:
            return
        keep = bound - k
        if 0 < keep < total:
            j = min(j for j, _ in terms)
            lp = self.stack[j]
            self.stack[j] = Loop(lp.var, lp.extent * keep / total, lp.kind, lp.auto_unroll,
                                 lp.declared)

    def store(self, s: Store) -> None:
        ops = self.pending
        self.pending = [0] * len(OP_NAMES)
        loads: list[Load] = []
        self.count(s.value, ops, loads)
        self.count(s.index, ops, loads)
        if s.predicate is not None:
            self.count(s.predicate, ops, loads)
        accs = [self.access(s.buffer, s.index, True)]
        accs.extend(self.access(ld.buffer, ld.index, False) for ld in loads)
        self.stores.append(StoreInfo(s.buffer, tuple(self.stack), tuple(ops), tuple(accs),
                                     self.alloc_depth.get(s.buffer, -1)))

    def access(self, buf: Buffer, index: Any, is_write: bool) -> Access:
        coeffs, _, nl = affine(index, self.lets)
        return Access(buf, is_write, tuple(coeffs.items()), nl)

    @staticmethod
    def count(e: Any, ops: list[int], loads: list[Load] | None = None) -> None:
        todo = [e]
        while todo:
            n = todo.pop()
            t = type(n)
            if t is Var or t is IntImm or t is FloatImm:
                continue
            if t is Load:
                if loads is not None:
                    loads.append(n)
                todo.append(n.index)
                if n.predicate is not None:
                    todo.append(n.predicate)
                continue
            if t is BinOp:
                cls, lanes = _dtype_info(n.a.dtype)
                op = n.op
                if op in LOGIC_OPS:
                    ops[_OP["bool_op"]] += lanes
                elif op in COMPARE_OPS:
                    ops[_OP["float_cmp" if cls == "float" else "int_cmp"]] += lanes
                elif cls in ("float", "int"):
                    ops[_OP[f"{cls}_{_ARITH[op]}"]] += lanes
                todo.append(n.a)
                todo.append(n.b)
            elif t is Not:
                ops[_OP["bool_op"]] += _dtype_info(n.dtype)[1]
                todo.append(n.a)
            elif t is Select:
                ops[_OP["select_op"]] += _dtype_info(n.dtype)[1]
                todo.extend((n.cond, n.true_value, n.false_value))
            elif t is Call:
                if n.name not in _NO_COST_CALLS:
                    cls, lanes = _dtype_info(n.dtype)
                    if cls == "float":
                        name = "float_mathfunc" if n.name in _MATH else "float_otherfunc"
                    else:
                        name = "int_otherfunc"
                    ops[_OP[name]] += lanes
                todo.extend(n.args)
            else:
                todo.extend(children(n))


def _conjuncts(c: Any) -> list[Any]:
    if isinstance(c, BinOp) and c.op is BinOpKind.AND:
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def walk(body: Any) -> list[StoreInfo]:
    """The :class:`StoreInfo` of every store statement of ``body``, in program order.

    Raises
    ------
    TypeError, ValueError
        For a statement kind or a loop extent the analysis does not handle.
    """
    w = _Walker()
    w.stmt(body)
    return w.stores
