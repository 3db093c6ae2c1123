"""Integer linear forms and constant interval bounds: the arithmetic core of the simplifier.

A :class:`Lin` is ``const + sum(coeff * atom)`` with atoms keyed structurally (two structurally
equal subexpressions are the same atom). :class:`LinearForms` converts expressions to and from
linear forms and computes constant inclusive bounds (``-inf``/``inf`` when unknown) under
variable ranges; :class:`~templtune.te.simplify.Simplifier` builds on it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from templtune import dtype as dt
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

__all__ = ["INF", "Bound", "Lin", "LinearForms", "is_lin_dtype", "mul_bound"]

INF = math.inf
Bound = tuple[float, float]  # ints, or -inf/+inf for "unknown"

SMALL_INT_RANGE = {"bool": (0, 1), "int8": (-128, 127), "uint8": (0, 255),
                   "int16": (-32768, 32767), "uint16": (0, 65535)}


_LIN_DTYPES = frozenset({"int8", "int16", "int32", "int64"})


def is_lin_dtype(dtype: str) -> bool:
    """Scalar signed integers get the linear-form treatment (uint wraps, vectors are lanes)."""
    return dtype in _LIN_DTYPES


# ------------------------------------------------------------------------- interval helpers


def fdiv(x: float, c: int) -> float:
    """floor(x / c) for c > 0, with infinities passing through."""
    return x if math.isinf(x) else x // c  # type: ignore[operator]


def mul_bound(a: Bound, b: Bound) -> Bound:
    def m(x: float, y: float) -> float:
        if x == 0 or y == 0:
            return 0
        return x * y

    corners = [m(a[0], b[0]), m(a[0], b[1]), m(a[1], b[0]), m(a[1], b[1])]
    return min(corners), max(corners)


class Lin:
    """An integer linear form ``const + sum(coeff * atom)``; atoms keyed structurally."""

    __slots__ = ("const", "terms")

    def __init__(self, const_: int = 0, terms: dict[Any, list[Any]] | None = None) -> None:
        self.const = const_
        self.terms: dict[Any, list[Any]] = terms if terms is not None else {}

    def copy(self) -> Lin:
        return Lin(self.const, {k: [a, c] for k, (a, c) in self.terms.items()})

    def add(self, o: Lin, scale: int = 1) -> Lin:
        return self.copy().iadd(o, scale)

    def iadd(self, o: Lin, scale: int = 1) -> Lin:
        """``self.add(o, scale)`` in place (terms in the same order); only for a form no one
        else holds."""
        terms = self.terms
        zero = any(c == 0 for _, c in terms.values())
        for k, (a, c) in o.terms.items():
            t = terms.get(k)
            if t is None:
                terms[k] = t = [a, c * scale]
            else:
                t[1] += c * scale
            if t[1] == 0:
                zero = True
        if zero:
            self.terms = {k: v for k, v in terms.items() if v[1] != 0}
        self.const += o.const * scale
        return self

    def scale(self, s: int) -> Lin:
        if s == 0:
            return Lin(0)
        return Lin(self.const * s, {k: [a, c * s] for k, (a, c) in self.terms.items()})

_KEY_FIELDS: dict[type, tuple[str, ...]] = {}  # field names per node class (for key())


class LinearForms:
    """Structural keys, linear forms and constant bounds, memoized per instance. Subclasses set
    ``ranges`` (Var -> inclusive (lo, hi)) and the memo dicts before use."""

    ranges: dict[Var, Bound]
    _keys: dict[Any, Any]
    _lins: dict[Any, Lin]
    _bounds: dict[Any, Bound]

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
            k = (e.op.value, e.dtype, self.key(e.a), self.key(e.b))  # str: cheap hash
        else:
            parts: list[Any] = [type(e).__name__]
            names = _KEY_FIELDS.get(type(e))
            if names is None:
                names = _KEY_FIELDS[type(e)] = tuple(f.name for f in dataclasses.fields(e))
            for name in names:
                v = getattr(e, name)
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

    def lin(self, e: PrimExpr) -> Lin:
        """Linear form of an already simplified integer expression."""
        r = self._lins.get(e)
        if r is not None:
            return r
        if isinstance(e, IntImm):
            r = Lin(e.value)
        elif isinstance(e, BinOp) and e.op is BinOpKind.ADD:
            r = self.lin(e.a).add(self.lin(e.b))
        elif isinstance(e, BinOp) and e.op is BinOpKind.SUB:
            r = self.lin(e.a).add(self.lin(e.b), -1)
        elif isinstance(e, BinOp) and e.op is BinOpKind.MUL and isinstance(e.b, IntImm):
            r = self.lin(e.a).scale(e.b.value)
        elif isinstance(e, BinOp) and e.op is BinOpKind.MUL and isinstance(e.a, IntImm):
            r = self.lin(e.b).scale(e.a.value)
        else:
            r = Lin(0, {self.key(e): [e, 1]})
        self._lins[e] = r
        return r

    def _fuse_divmod(self, ln: Lin, dtype: str) -> Lin:
        """``(X // c)*c*k + (X % c)*k -> X*k`` (the inverse of split/fuse index arithmetic)."""
        for k, (atom, coeff) in list(ln.terms.items()):
            if k not in ln.terms:
                continue
            if not (isinstance(atom, BinOp) and atom.op is BinOpKind.FLOORMOD
                    and isinstance(atom.b, IntImm)):
                continue
            c = atom.b.value
            dkey = (BinOpKind.FLOORDIV.value, dtype, self.key(atom.a), self.key(atom.b))
            d = ln.terms.get(dkey)
            if d is None or d[1] != coeff * c:
                continue
            ln = ln.copy()
            del ln.terms[k]
            del ln.terms[dkey]
            ln = ln.add(self.lin(atom.a), coeff)
        return ln

    def from_lin(self, ln: Lin, dtype: str) -> PrimExpr:
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

    def lin_bound(self, ln: Lin) -> Bound:
        lo: float = ln.const
        hi: float = ln.const
        for a, c in ln.terms.values():
            blo, bhi = mul_bound(self.bound(a), (c, c))
            lo, hi = lo + blo, hi + bhi
            if lo == -INF and hi == INF:
                break
        return lo, hi

    def _bound(self, e: PrimExpr) -> Bound:
        if isinstance(e, IntImm):
            return e.value, e.value
        if isinstance(e, Var):
            return self.ranges.get(e, SMALL_INT_RANGE.get(e.dtype, (-INF, INF)))
        if isinstance(e, BinOp):
            op = e.op
            if op in (BinOpKind.ADD, BinOpKind.SUB) and is_lin_dtype(e.dtype):
                return self.lin_bound(self.lin(e))
            a, b = self.bound(e.a), self.bound(e.b)
            if op is BinOpKind.ADD:
                return a[0] + b[0], a[1] + b[1]
            if op is BinOpKind.SUB:
                return a[0] - b[1], a[1] - b[0]
            if op is BinOpKind.MUL:
                return mul_bound(a, b)
            if op is BinOpKind.MIN:
                return min(a[0], b[0]), min(a[1], b[1])
            if op is BinOpKind.MAX:
                return max(a[0], b[0]), max(a[1], b[1])
            if op is BinOpKind.FLOORDIV and b[0] > 0 and b[0] == b[1]:
                c = int(b[0])
                return fdiv(a[0], c), fdiv(a[1], c)
            if op is BinOpKind.FLOORDIV and b[0] > 0 and not math.isinf(b[1]):
                cs = [fdiv(x, int(y)) for x in a for y in b]
                return min(cs), max(cs)
            if op is BinOpKind.FLOORMOD and b[0] > 0 and not math.isinf(b[1]):
                c = int(b[1])
                if b[0] == b[1] and fdiv(a[0], c) == fdiv(a[1], c) and not math.isinf(a[0]):
                    return a[0] % c, a[1] % c
                if a[0] >= 0:
                    return 0, min(a[1], c - 1)
                return 0, c - 1
            if op in (BinOpKind.DIV,) and a[0] >= 0 and b[0] > 0 and not math.isinf(b[1]):
                return fdiv(a[0], int(b[1])), fdiv(a[1], int(b[0]))
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
                    tb = SMALL_INT_RANGE.get(e.dtype, (-INF, INF))
                    if tb[0] <= vb[0] and vb[1] <= tb[1]:
                        return vb
                return SMALL_INT_RANGE.get(e.dtype, (-INF, INF))
            return -INF, INF
        if isinstance(e, Not):
            return 0, 1
        if isinstance(e, Call) and e.name == "likely" and e.args:
            return self.bound(e.args[0])
        return SMALL_INT_RANGE.get(e.dtype, (-INF, INF))
