"""Arithmetic simplifier for index and condition expressions.

``simplify(e, ranges)`` rewrites integer arithmetic into a canonical linear form
``t1*c1 + t2*c2 + ... + c0`` (like terms merged, terms kept in order of first appearance, the
constant last), folds constants, and uses the variable ranges it is given to remove floor
divisions/modulos (``(i*8 + j) // 8 -> i`` when ``0 <= j < 8``), decide comparisons and pick the
side of ``min``/``max``. All integer rules follow floor semantics, so they are correct for
negative values too. Floating-point expressions are only constant-folded and stripped of
``x + 0`` / ``x * 1``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    FloatImm,
    IntImm,
    IterVar,
    Not,
    PrimExpr,
    Range,
    Select,
    TensorLoad,
    Var,
    _fold,
    cast,
    const,
)
from templtune.te.functor import Mutator

__all__ = ["simplify", "can_prove", "const_bound", "Simplifier"]

INF = math.inf
Bound = tuple[float, float]  # ints, or -inf/+inf for "unknown"

_LIN_OPS = frozenset({BinOpKind.ADD, BinOpKind.SUB, BinOpKind.MUL})
_FLIP = {BinOpKind.LT: BinOpKind.GE, BinOpKind.LE: BinOpKind.GT, BinOpKind.GT: BinOpKind.LE,
         BinOpKind.GE: BinOpKind.LT, BinOpKind.EQ: BinOpKind.NE, BinOpKind.NE: BinOpKind.EQ}
_SMALL_INT_RANGE = {"bool": (0, 1), "int8": (-128, 127), "uint8": (0, 255),
                    "int16": (-32768, 32767), "uint16": (0, 65535)}


def _is_lin_dtype(dtype: str) -> bool:
    d = dt.parse(dtype)
    return d.code == "int" and d.lanes == 1


# ------------------------------------------------------------------------- interval helpers


def _fdiv(x: float, c: int) -> float:
    """floor(x / c) for c > 0, with infinities passing through."""
    return x if math.isinf(x) else x // c  # type: ignore[operator]


def _mul_b(a: Bound, b: Bound) -> Bound:
    def m(x: float, y: float) -> float:
        if x == 0 or y == 0:
            return 0
        return x * y

    corners = [m(a[0], b[0]), m(a[0], b[1]), m(a[1], b[0]), m(a[1], b[1])]
    return min(corners), max(corners)


class _Lin:
    """An integer linear form ``const + sum(coeff * atom)``; atoms keyed structurally."""

    __slots__ = ("const", "terms")

    def __init__(self, const_: int = 0, terms: dict[Any, list[Any]] | None = None) -> None:
        self.const = const_
        self.terms: dict[Any, list[Any]] = terms if terms is not None else {}

    def copy(self) -> _Lin:
        return _Lin(self.const, {k: [a, c] for k, (a, c) in self.terms.items()})

    def add(self, o: _Lin, scale: int = 1) -> _Lin:
        r = self.copy()
        r.const += o.const * scale
        for k, (a, c) in o.terms.items():
            if k in r.terms:
                r.terms[k][1] += c * scale
            else:
                r.terms[k] = [a, c * scale]
        r.terms = {k: v for k, v in r.terms.items() if v[1] != 0}
        return r

    def scale(self, s: int) -> _Lin:
        if s == 0:
            return _Lin(0)
        return _Lin(self.const * s, {k: [a, c * s] for k, (a, c) in self.terms.items()})


class Simplifier(Mutator):
    """One simplification context: variable ranges plus memo tables (by node identity).

    Reuse one instance to simplify many expressions under the same ranges cheaply."""

    def __init__(self, ranges: Mapping[Any, Any] | None = None) -> None:
        self.ranges: dict[Var, Bound] = {}
        for v, r in (ranges or {}).items():
            var = v.var if isinstance(v, IterVar) else v
            self.ranges[var] = self._range_bound(r)
        self._memo: dict[Any, Any] = {}
        self._keys: dict[Any, Any] = {}
        self._lins: dict[Any, _Lin] = {}
        self._bounds: dict[Any, Bound] = {}

    def _range_bound(self, r: Any) -> Bound:
        if isinstance(r, Range):
            mn, ext = Simplifier().visit(r.min), Simplifier().visit(r.extent)
            if isinstance(mn, IntImm) and isinstance(ext, IntImm):
                return mn.value, mn.value + ext.value - 1
            if isinstance(mn, IntImm):
                return mn.value, INF
            return -INF, INF
        if isinstance(r, tuple) and len(r) == 2:  # inclusive (lo, hi)
            lo, hi = r
            return (-INF if lo is None else int(lo)), (INF if hi is None else int(hi))
        lo_e, hi_e = getattr(r, "min", None), getattr(r, "max", None)  # bound.Interval
        lo = lo_e.value if isinstance(lo_e, IntImm) else -INF
        hi = hi_e.value if isinstance(hi_e, IntImm) else INF
        return lo, hi

    # ------------------------------------------------------------------------ memo + keys

    def visit(self, node: Any) -> Any:
        r = self._memo.get(node)
        if r is None:
            r = super().visit(node)
            self._memo[node] = r
            self._memo[r] = r
        return r

    def key(self, e: Any) -> Any:
        """A hashable structural key: equal keys mean structurally equal expressions."""
        if isinstance(e, Var):
            return e
        k = self._keys.get(e)
        if k is not None:
            return k
        if isinstance(e, (IntImm, FloatImm)):
            k = (type(e).__name__, e.dtype, e.value)
        elif isinstance(e, BinOp):
            k = (e.op, e.dtype, self.key(e.a), self.key(e.b))
        else:
            parts: list[Any] = [type(e).__name__]
            for f in dataclasses.fields(e):
                v = getattr(e, f.name)
                if isinstance(v, tuple):
                    parts.append(tuple(self.key(x) if isinstance(x, PrimExpr) else x for x in v))
                elif isinstance(v, PrimExpr):
                    parts.append(self.key(v))
                else:
                    parts.append(v)
            k = tuple(parts)
            try:
                hash(k)
            except TypeError:
                k = ("id", id(e))
        self._keys[e] = k
        return k

    # ------------------------------------------------------------------------ linear forms

    def lin(self, e: PrimExpr) -> _Lin:
        """Linear form of an already simplified integer expression."""
        r = self._lins.get(e)
        if r is not None:
            return r
        if isinstance(e, IntImm):
            r = _Lin(e.value)
        elif isinstance(e, BinOp) and e.op is BinOpKind.ADD:
            r = self.lin(e.a).add(self.lin(e.b))
        elif isinstance(e, BinOp) and e.op is BinOpKind.SUB:
            r = self.lin(e.a).add(self.lin(e.b), -1)
        elif isinstance(e, BinOp) and e.op is BinOpKind.MUL and isinstance(e.b, IntImm):
            r = self.lin(e.a).scale(e.b.value)
        elif isinstance(e, BinOp) and e.op is BinOpKind.MUL and isinstance(e.a, IntImm):
            r = self.lin(e.b).scale(e.a.value)
        else:
            r = _Lin(0, {self.key(e): [e, 1]})
        self._lins[e] = r
        return r

    def _fuse_divmod(self, ln: _Lin, dtype: str) -> _Lin:
        """``(X // c)*c*k + (X % c)*k -> X*k`` (the inverse of split/fuse index arithmetic)."""
        for k, (atom, coeff) in list(ln.terms.items()):
            if k not in ln.terms:
                continue
            if not (isinstance(atom, BinOp) and atom.op is BinOpKind.FLOORMOD
                    and isinstance(atom.b, IntImm)):
                continue
            c = atom.b.value
            dkey = (BinOpKind.FLOORDIV, dtype, self.key(atom.a), self.key(atom.b))
            d = ln.terms.get(dkey)
            if d is None or d[1] != coeff * c:
                continue
            ln = ln.copy()
            del ln.terms[k]
            del ln.terms[dkey]
            ln = ln.add(self.lin(atom.a), coeff)
        return ln

    def from_lin(self, ln: _Lin, dtype: str) -> PrimExpr:
        terms = [(a, c) for a, c in ln.terms.values() if c != 0]
        if len(terms) > 1:
            ln = self._fuse_divmod(ln, dtype)
            terms = [(a, c) for a, c in ln.terms.values() if c != 0]

        def term(a: PrimExpr, c: int) -> PrimExpr:
            return a if c == 1 else BinOp(BinOpKind.MUL, a, IntImm(dtype, c), dtype)

        pos = [(a, c) for a, c in terms if c > 0]
        neg = [(a, -c) for a, c in terms if c < 0]
        cst = ln.const
        res: PrimExpr | None = None
        for a, c in pos:
            t = term(a, c)
            res = t if res is None else BinOp(BinOpKind.ADD, res, t, dtype)
        if res is None:
            if cst > 0 or not neg:
                res, cst = IntImm(dtype, cst), 0
            else:
                a, c = neg.pop(0)
                res = term(a, -c)
        for a, c in neg:
            res = BinOp(BinOpKind.SUB, res, term(a, c), dtype)
        if cst > 0:
            res = BinOp(BinOpKind.ADD, res, IntImm(dtype, cst), dtype)
        elif cst < 0:
            res = BinOp(BinOpKind.SUB, res, IntImm(dtype, -cst), dtype)
        r = res
        self._lins[r] = ln
        return r

    # ------------------------------------------------------------------------------ bounds

    def bound(self, e: PrimExpr) -> Bound:
        """Constant inclusive bounds of a simplified integer expression (±inf when unknown)."""
        b = self._bounds.get(e)
        if b is None:
            b = self._bound(e)
            self._bounds[e] = b
        return b

    def lin_bound(self, ln: _Lin) -> Bound:
        lo = hi = ln.const
        for a, c in ln.terms.values():
            blo, bhi = _mul_b(self.bound(a), (c, c))
            lo, hi = lo + blo, hi + bhi
            if lo == -INF and hi == INF:
                break
        return lo, hi

    def _bound(self, e: PrimExpr) -> Bound:
        if isinstance(e, IntImm):
            return e.value, e.value
        if isinstance(e, Var):
            return self.ranges.get(e, _SMALL_INT_RANGE.get(e.dtype, (-INF, INF)))
        if isinstance(e, BinOp):
            op = e.op
            if op in (BinOpKind.ADD, BinOpKind.SUB) and _is_lin_dtype(e.dtype):
                return self.lin_bound(self.lin(e))
            a, b = self.bound(e.a), self.bound(e.b)
            if op is BinOpKind.ADD:
                return a[0] + b[0], a[1] + b[1]
            if op is BinOpKind.SUB:
                return a[0] - b[1], a[1] - b[0]
            if op is BinOpKind.MUL:
                return _mul_b(a, b)
            if op is BinOpKind.MIN:
                return min(a[0], b[0]), min(a[1], b[1])
            if op is BinOpKind.MAX:
                return max(a[0], b[0]), max(a[1], b[1])
            if op is BinOpKind.FLOORDIV and b[0] > 0 and b[0] == b[1]:
                c = int(b[0])
                return _fdiv(a[0], c), _fdiv(a[1], c)
            if op is BinOpKind.FLOORDIV and b[0] > 0 and not math.isinf(b[1]):
                cs = [_fdiv(x, int(y)) for x in a for y in b]
                return min(cs), max(cs)
            if op is BinOpKind.FLOORMOD and b[0] > 0 and not math.isinf(b[1]):
                c = int(b[1])
                if b[0] == b[1] and _fdiv(a[0], c) == _fdiv(a[1], c) and not math.isinf(a[0]):
                    return a[0] % c, a[1] % c
                if a[0] >= 0:
                    return 0, min(a[1], c - 1)
                return 0, c - 1
            if op in (BinOpKind.DIV,) and a[0] >= 0 and b[0] > 0 and not math.isinf(b[1]):
                return _fdiv(a[0], int(b[1])), _fdiv(a[1], int(b[0]))
            if op in (BinOpKind.EQ, BinOpKind.NE, BinOpKind.LT, BinOpKind.LE, BinOpKind.GT,
                      BinOpKind.GE, BinOpKind.AND, BinOpKind.OR):
                return 0, 1
            return -INF, INF
        if isinstance(e, Select):
            t, f = self.bound(e.true_value), self.bound(e.false_value)
            return min(t[0], f[0]), max(t[1], f[1])
        if isinstance(e, Cast):
            if dt.is_int(e.dtype) or dt.is_bool(e.dtype):
                if dt.is_int(e.value.dtype) or dt.is_bool(e.value.dtype):
                    vb = self.bound(e.value)
                    tb = _SMALL_INT_RANGE.get(e.dtype, (-INF, INF))
                    if tb[0] <= vb[0] and vb[1] <= tb[1]:
                        return vb
                return _SMALL_INT_RANGE.get(e.dtype, (-INF, INF))
            return -INF, INF
        if isinstance(e, Not):
            return 0, 1
        if isinstance(e, Call) and e.name == "likely" and e.args:
            return self.bound(e.args[0])
        return _SMALL_INT_RANGE.get(e.dtype, (-INF, INF))

    # ----------------------------------------------------------------------------- visitors

    def visit_Var(self, node: Var) -> PrimExpr:
        b = self.ranges.get(node)
        if b is not None and b[0] == b[1]:
            return IntImm(node.dtype, int(b[0]))
        return node

    def visit_Cast(self, node: Cast) -> PrimExpr:
        v = self.visit(node.value)
        if v.dtype == node.dtype:
            return v
        if isinstance(v, (IntImm, FloatImm)):
            return cast(node.dtype, v)
        return node if v is node.value else Cast(node.dtype, v)

    def visit_Not(self, node: Not) -> PrimExpr:
        a = self.visit(node.a)
        if isinstance(a, IntImm):
            return const(not a.value, node.dtype)
        if isinstance(a, Not):
            return a.a
        if isinstance(a, BinOp) and a.op in _FLIP and _is_lin_dtype(a.a.dtype):
            return self._compare(_FLIP[a.op], a.a, a.b, a.dtype)
        return node if a is node.a else Not(a, node.dtype)

    def visit_Select(self, node: Select) -> PrimExpr:
        c = self.visit(node.cond)
        if isinstance(c, IntImm):
            return self.visit(node.true_value if c.value else node.false_value)
        t, f = self.visit(node.true_value), self.visit(node.false_value)
        if self.key(t) == self.key(f):
            return t
        if c is node.cond and t is node.true_value and f is node.false_value:
            return node
        return Select(c, t, f, node.guarded)

    def visit_Call(self, node: Call) -> PrimExpr:
        args = tuple(self.visit(a) for a in node.args)
        if node.name == "likely" and len(args) == 1 and isinstance(args[0], IntImm):
            return args[0]
        if all(x is y for x, y in zip(args, node.args)):
            return node
        return Call(node.dtype, node.name, args)

    def visit_TensorLoad(self, node: TensorLoad) -> PrimExpr:
        idx = tuple(self.visit(i) for i in node.indices)
        if all(x is y for x, y in zip(idx, node.indices)):
            return node
        return TensorLoad(node.tensor, idx)

    def visit_BinOp(self, node: BinOp) -> PrimExpr:
        a, b = self.visit(node.a), self.visit(node.b)
        op, dtype = node.op, node.dtype
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            try:
                r = _fold(op, a, b)
            except ExprError:  # division by a constant zero: leave it for the user to see
                r = None
            if r is not None:
                return r
        if op in _LIN_OPS and _is_lin_dtype(dtype):
            return self._linear(op, a, b, dtype)
        if op in (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD) and _is_lin_dtype(dtype) \
                and isinstance(b, IntImm) and b.value > 0:
            return self._divmod(op, a, b.value, dtype)
        if op in (BinOpKind.MIN, BinOpKind.MAX):
            return self._minmax(op, a, b, dtype)
        if op in _FLIP:
            return self._compare(op, a, b, dtype)
        if op in (BinOpKind.AND, BinOpKind.OR):
            return self._logic(op, a, b, dtype)
        if dt.is_float(dtype) and dt.lanes(dtype) == 1:
            r2 = self._float_identity(op, a, b)
            if r2 is not None:
                return r2
        if a is node.a and b is node.b:
            return node
        return BinOp(op, a, b, dtype)

    # ------------------------------------------------------------------------------ rules

    def _linear(self, op: BinOpKind, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        la, lb = self.lin(a), self.lin(b)
        if op is BinOpKind.ADD:
            return self.from_lin(la.add(lb), dtype)
        if op is BinOpKind.SUB:
            return self.from_lin(la.add(lb, -1), dtype)
        if not lb.terms:
            return self.from_lin(la.scale(lb.const), dtype)
        if not la.terms:
            return self.from_lin(lb.scale(la.const), dtype)
        prod = BinOp(BinOpKind.MUL, a, b, dtype)
        return self.from_lin(self.lin(prod), dtype)

    def _divmod(self, op: BinOpKind, a: PrimExpr, c: int, dtype: str) -> PrimExpr:
        if op is BinOpKind.FLOORDIV:
            if c == 1:
                return a
            # (x // c1) // c == x // (c1 * c) for positive divisors
            if isinstance(a, BinOp) and a.op is BinOpKind.FLOORDIV and isinstance(a.b, IntImm) \
                    and a.b.value > 0:
                return self._divmod(op, a.a, a.b.value * c, dtype)
        elif c == 1:
            return IntImm(dtype, 0)
        elif isinstance(a, BinOp) and a.op is BinOpKind.FLOORMOD and isinstance(a.b, IntImm) \
                and a.b.value > 0 and a.b.value % c == 0:
            # (x % (k*c)) % c == x % c
            return self._divmod(op, a.a, c, dtype)
        ln = self.lin(a)
        g = c
        for _, co in ln.terms.values():
            g = math.gcd(g, co)
        g = math.gcd(g, ln.const)
        if op is BinOpKind.FLOORDIV:
            if g > 1:  # floor(g*A / (g*B)) == floor(A / B)
                ln, c = _Lin(ln.const // g, {k: [x, co // g] for k, (x, co) in ln.terms.items()}), c // g
                if c == 1:
                    return self.from_lin(ln, dtype)
            q = _Lin(ln.const // c)
            r = _Lin(ln.const % c)
            for k, (x, co) in ln.terms.items():
                (q if co % c == 0 else r).terms[k] = [x, co // c if co % c == 0 else co]
            lo, hi = self.lin_bound(r)
            if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
                q.const += int(lo // c)
                return self.from_lin(q, dtype)
            if not r.terms:
                return self.from_lin(q, dtype)
            rest = BinOp(BinOpKind.FLOORDIV, self.from_lin(r, dtype), IntImm(dtype, c), dtype)
            return self.from_lin(q.add(self.lin(rest)), dtype)
        # floormod: terms with coefficients divisible by c vanish; if the rest lies in one
        # period it is the answer, otherwise coefficients and constant reduce modulo c
        r1 = _Lin(ln.const % c, {k: [x, co] for k, (x, co) in ln.terms.items() if co % c})
        lo, hi = self.lin_bound(r1)
        if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
            return self.from_lin(r1.add(_Lin(-int(lo // c) * c)), dtype)
        r = _Lin(ln.const % c)
        for k, (x, co) in ln.terms.items():
            if co % c:
                r.terms[k] = [x, co % c]
        if not r.terms:
            return IntImm(dtype, r.const)
        g = c
        for _, co in r.terms.values():
            g = math.gcd(g, co)
        g = math.gcd(g, r.const)
        lo, hi = self.lin_bound(r)
        if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
            return self.from_lin(r.add(_Lin(-int(lo // c) * c)), dtype)
        if g > 1:  # (g*A) % (g*B) == g * (A % B)
            inner = _Lin(r.const // g, {k: [x, co // g] for k, (x, co) in r.terms.items()})
            m = self._divmod(op, self.from_lin(inner, dtype), c // g, dtype)
            return self.from_lin(self.lin(m).scale(g), dtype)
        return BinOp(BinOpKind.FLOORMOD, self.from_lin(r, dtype), IntImm(dtype, c), dtype)

    def _minmax(self, op: BinOpKind, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        if self.key(a) == self.key(b):
            return a
        if _is_lin_dtype(dtype):
            lo, hi = self.lin_bound(self.lin(a).add(self.lin(b), -1))
            if hi <= 0:
                return a if op is BinOpKind.MIN else b
            if lo >= 0:
                return b if op is BinOpKind.MIN else a
        return BinOp(op, a, b, dtype)

    def _compare(self, op: BinOpKind, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        if _is_lin_dtype(a.dtype) and _is_lin_dtype(b.dtype):
            d = self.lin(a).add(self.lin(b), -1)
            lo, hi = self.lin_bound(d)
            verdict: bool | None = None
            if op is BinOpKind.LT:
                verdict = True if hi < 0 else False if lo >= 0 else None
            elif op is BinOpKind.LE:
                verdict = True if hi <= 0 else False if lo > 0 else None
            elif op is BinOpKind.GT:
                verdict = True if lo > 0 else False if hi <= 0 else None
            elif op is BinOpKind.GE:
                verdict = True if lo >= 0 else False if hi < 0 else None
            elif op is BinOpKind.EQ:
                verdict = True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
            elif op is BinOpKind.NE:
                verdict = False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
            if verdict is not None:
                return IntImm(dtype, int(verdict))
        elif self.key(a) == self.key(b) and not dt.is_float(a.dtype):
            return IntImm(dtype, int(op in (BinOpKind.EQ, BinOpKind.LE, BinOpKind.GE)))
        return BinOp(op, a, b, dtype)

    def _logic(self, op: BinOpKind, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        absorb = 0 if op is BinOpKind.AND else 1
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm):
                return IntImm(dtype, absorb) if bool(x.value) == bool(absorb) else y
        if self.key(a) == self.key(b):
            return a
        return BinOp(op, a, b, dtype)

    def _float_identity(self, op: BinOpKind, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
        def is_c(x: PrimExpr, v: float) -> bool:
            return isinstance(x, FloatImm) and x.value == v

        if op is BinOpKind.ADD:
            return b if is_c(a, 0.0) else a if is_c(b, 0.0) else None
        if op is BinOpKind.SUB:
            return a if is_c(b, 0.0) else None
        if op is BinOpKind.MUL:
            return b if is_c(a, 1.0) else a if is_c(b, 1.0) else None
        if op is BinOpKind.DIV:
            return a if is_c(b, 1.0) else None
        return None


def simplify(e: Any, ranges: Mapping[Any, Any] | None = None) -> Any:
    """Simplify an expression (or a loop-IR statement) under optional variable ranges.

    Parameters
    ----------
    e : PrimExpr or Stmt
        The expression; Python ints/floats are converted.
    ranges : Mapping[Var, Range] or None
        Known domains of variables (``Range(min, extent)``, an inclusive ``(lo, hi)`` tuple or a
        :class:`templtune.te.bound.Interval`; IterVars may be used as keys). A variable whose range
        has a single point is replaced by that constant.

    Returns
    -------
    PrimExpr
        An equivalent expression: integer arithmetic in canonical linear form, constants folded,
        divisions / comparisons / min / max decided where the ranges prove it.
    """
    if isinstance(e, (int, float, bool)):
        return const(e)
    if isinstance(e, IterVar):
        e = e.var
    return Simplifier(ranges).visit(e)


def can_prove(cond: Any, ranges: Mapping[Any, Any] | None = None) -> bool:
    """True when ``cond`` simplifies to the constant true under ``ranges``."""
    r = simplify(cond, ranges)
    return isinstance(r, IntImm) and bool(r.value)


def const_bound(e: Any, ranges: Mapping[Any, Any] | None = None) -> tuple[float, float]:
    """Inclusive constant bounds ``(lo, hi)`` of an integer expression; ``-inf``/``inf`` where
    unknown."""
    s = Simplifier(ranges)
    return s.bound(s.visit(e))
