"""Symbolic interval (bound) analysis.

``eval_interval(e, dom)`` over-approximates the set of values ``e`` takes when each variable in
``dom`` ranges over its :class:`Interval`; variables not in ``dom`` are single points, so the
answer may be symbolic in them: the index ``yo*8 + yi`` with ``yi`` in ``[0, 7]`` gives
``[yo*8, yo*8 + 7]``. Schedule bound inference (compute_at) is built on it.

An endpoint of ``None`` means unbounded on that side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    IntImm,
    IterVar,
    Not,
    PrimExpr,
    Range,
    Select,
    Var,
    binary,
    cast,
    const,
    convert,
)
from templtune.te.functor import children
from templtune.te.simplify import Simplifier

__all__ = ["Interval", "eval_interval", "const_interval", "union"]


@dataclass(frozen=True, slots=True, eq=False)
class Interval:
    """The inclusive interval ``[min, max]``; endpoints are expressions (``None``: unbounded)."""

    min: PrimExpr | None
    max: PrimExpr | None

    @staticmethod
    def point(e: Any) -> Interval:
        x = convert(e)
        return Interval(x, x)

    @staticmethod
    def from_range(r: Range) -> Interval:
        """``Range(min, extent)`` -> ``[min, min + extent - 1]``."""
        s = Simplifier()
        return Interval(s.visit(r.min), s.visit(r.min + r.extent - 1))

    @staticmethod
    def everything() -> Interval:
        return Interval(None, None)

    @property
    def is_bounded(self) -> bool:
        return self.min is not None and self.max is not None

    def is_point(self) -> bool:
        return (self.min is not None and self.max is not None
                and (self.min is self.max or _same(self.min, self.max)))

    def extent(self) -> PrimExpr:
        """``max - min + 1`` simplified; raises when unbounded."""
        if not self.is_bounded:
            raise ExprError(f"unbounded interval {self!r} has no extent")
        return Simplifier().visit(self.max - self.min + 1)  # type: ignore[operator]

    def to_range(self) -> Range:
        return Range(self.min, self.extent())  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Interval[{self.min}, {self.max}]"


def _same(a: PrimExpr, b: PrimExpr) -> bool:
    s = Simplifier()
    return bool(s.key(s.visit(a)) == s.key(s.visit(b)))


def _const(e: PrimExpr | None) -> int | None:
    return e.value if isinstance(e, IntImm) else None


class _Eval:
    def __init__(self, dom: Mapping[Any, Interval], ranges: Mapping[Any, Any] | None) -> None:
        self.dom: dict[Var, Interval] = {}
        for k, v in dom.items():
            var = k.var if isinstance(k, IterVar) else k
            self.dom[var] = Interval.from_range(v) if isinstance(v, Range) else v
        rng: dict[Var, Any] = dict(ranges or {})
        # constant parts of the domain also help simplify endpoints (min/max, floordiv)
        for var, iv in self.dom.items():
            lo, hi = _const(iv.min), _const(iv.max)
            if lo is not None or hi is not None:
                rng.setdefault(var, (lo, hi))
        self.simp = Simplifier(ranges)
        self.cbound = Simplifier(rng)
        self.memo: dict[PrimExpr, Interval] = {}
        self.uses: dict[Any, bool] = {}

    def s(self, e: PrimExpr | None) -> PrimExpr | None:
        return None if e is None else self.simp.visit(e)

    def sign(self, e: PrimExpr) -> int | None:
        """+1 / -1 / 0 when the sign of e (over the whole domain) is known."""
        lo, hi = self.cbound.bound(self.cbound.visit(e))
        if lo > 0:
            return 1
        if hi < 0:
            return -1
        if lo == hi == 0:
            return 0
        return None

    def _uses_dom(self, e: Any) -> bool:
        """Whether a ranging variable occurs in ``e`` (remembered per node: asking it of every
        subexpression with a fresh walk was quadratic in the depth)."""
        r = self.uses.get(e)
        if r is None:
            if isinstance(e, Var):
                r = e in self.dom
            else:
                r = False
                for c in children(e):
                    if self._uses_dom(c):
                        r = True
                        break
            self.uses[e] = r
        return r

    def ev(self, e: PrimExpr) -> Interval:
        r = self.memo.get(e)
        if r is None:
            r = self._ev(e)
            self.memo[e] = r
        return r

    def _ev(self, e: PrimExpr) -> Interval:
        if isinstance(e, Var):
            iv = self.dom.get(e)
            return iv if iv is not None else Interval(e, e)
        if not self._uses_dom(e):
            x = self.s(e)
            return Interval(x, x)
        if isinstance(e, BinOp):
            return self._binop(e)
        if isinstance(e, Select):
            c = self.s(e.cond)
            if isinstance(c, IntImm):
                return self.ev(e.true_value if c.value else e.false_value)
            return union(self.ev(e.true_value), self.ev(e.false_value))
        if isinstance(e, Cast):
            v = self.ev(e.value)
            if dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
                return Interval(*(None if x is None else self.s(cast(e.dtype, x))
                                  for x in (v.min, v.max)))
            if dt.is_float(e.dtype):
                return Interval(*(None if x is None else cast(e.dtype, x) for x in (v.min, v.max)))
            return Interval.everything()
        if isinstance(e, Not) or (isinstance(e, BinOp) and e.dtype == "bool"):
            return Interval(const(False), const(True))
        if isinstance(e, Call) and e.name == "likely":
            return self.ev(e.args[0])
        if e.dtype == "bool":
            return Interval(const(False), const(True))
        return Interval.everything()

    def _binop(self, e: BinOp) -> Interval:
        op = e.op
        if op in (BinOpKind.EQ, BinOpKind.NE, BinOpKind.LT, BinOpKind.LE, BinOpKind.GT,
                  BinOpKind.GE, BinOpKind.AND, BinOpKind.OR):
            x = self.s(e)
            if isinstance(x, IntImm):
                return Interval(x, x)
            return Interval(const(False), const(True))
        a, b = self.ev(e.a), self.ev(e.b)

        def f(o: BinOpKind, x: PrimExpr | None, y: PrimExpr | None) -> PrimExpr | None:
            return None if x is None or y is None else self.s(binary(o, x, y))

        if op is BinOpKind.ADD:
            return Interval(f(op, a.min, b.min), f(op, a.max, b.max))
        if op is BinOpKind.SUB:
            return Interval(f(op, a.min, b.max), f(op, a.max, b.min))
        if op in (BinOpKind.MIN, BinOpKind.MAX):
            def either(x: PrimExpr | None, y: PrimExpr | None) -> PrimExpr | None:
                # min with an unbounded-above side is bounded by the other side (and dually)
                return y if x is None else x if y is None else f(op, x, y)

            if op is BinOpKind.MIN:
                return Interval(f(op, a.min, b.min), either(a.max, b.max))
            return Interval(either(a.min, b.min), f(op, a.max, b.max))
        if op is BinOpKind.MUL:
            return self._mul(e, a, b)
        if op in (BinOpKind.FLOORDIV, BinOpKind.DIV) and b.is_point() and dt.is_int(e.dtype):
            c = b.min
            sg = self.sign(c)  # type: ignore[arg-type]
            if sg == 1:
                if op is BinOpKind.DIV and self._nonneg(a) is not True:
                    return Interval.everything()
                return Interval(f(BinOpKind.FLOORDIV, a.min, c), f(BinOpKind.FLOORDIV, a.max, c))
            return Interval.everything()
        if op is BinOpKind.FLOORMOD and b.is_point() and dt.is_int(e.dtype):
            c = b.min
            assert c is not None  # a point interval has both ends
            if self.sign(c) != 1:
                return Interval.everything()
            if a.min is not None and a.max is not None:
                # within one period the modulo is monotone: [a.min % c, a.max % c]
                same = self.s(binary(BinOpKind.EQ, binary(BinOpKind.FLOORDIV, a.min, c),
                                     binary(BinOpKind.FLOORDIV, a.max, c)))
                if isinstance(same, IntImm) and same.value:
                    return Interval(f(op, a.min, c), f(op, a.max, c))
                lo = _const(a.min)
                if lo is not None and lo >= 0:
                    hi = self.s(binary(BinOpKind.MIN, a.max, self.simp.visit(c - 1)))
                    return Interval(const(0, e.dtype), hi)
            return Interval(const(0, e.dtype), self.s(c - 1))
        return Interval.everything()

    def _nonneg(self, a: Interval) -> bool | None:
        if a.min is None:
            return None
        sg = self.sign(a.min)
        return True if sg in (0, 1) else None

    def _mul(self, e: BinOp, a: Interval, b: Interval) -> Interval:
        if a.is_point() and not b.is_point():
            a, b = b, a
        if b.is_point():
            c = b.min
            assert c is not None  # a point interval has both ends
            sg = self.sign(c)
            if sg == 0:
                z = const(0, e.dtype)
                return Interval(z, z)

            def m(x: PrimExpr | None) -> PrimExpr | None:
                return None if x is None else self.s(binary(BinOpKind.MUL, x, c))

            if sg == 1:
                return Interval(m(a.min), m(a.max))
            if sg == -1:
                return Interval(m(a.max), m(a.min))
            return Interval.everything()
        # two ranging factors: only constant endpoints are handled
        al, ah, bl, bh = (_const(x) for x in (a.min, a.max, b.min, b.max))
        if al is None or ah is None or bl is None or bh is None:
            return Interval.everything()
        cs = [al * bl, al * bh, ah * bl, ah * bh]
        return Interval(const(min(cs), e.dtype), const(max(cs), e.dtype))


def eval_interval(e: Any, dom: Mapping[Any, Any], ranges: Mapping[Any, Any] | None = None
                  ) -> Interval:
    """Interval of values of ``e`` when the variables of ``dom`` range over their intervals.

    Parameters
    ----------
    e : PrimExpr
        An integer (or float) expression.
    dom : Mapping[Var, Interval]
        Domains of the ranging variables (a :class:`~templtune.te.expr.Range` is accepted too).
        Variables not in ``dom`` are fixed points and may appear in the result.
    ranges : Mapping[Var, Range], optional
        Extra facts for the simplifier about the fixed variables.

    Returns
    -------
    Interval
        Simplified endpoints; ``None`` for a side that cannot be bounded.
    """
    return _Eval(dom, ranges).ev(convert(e.var if isinstance(e, IterVar) else e))


def const_interval(e: Any, dom: Mapping[Any, Any]) -> tuple[int, int]:
    """Constant ``(lo, hi)`` bounds of ``e`` over ``dom``; raise :class:`ExprError` when an
    endpoint is not a constant."""
    iv = eval_interval(e, dom)
    lo, hi = _const(iv.min), _const(iv.max)
    if lo is None or hi is None:
        # the symbolic endpoints may still have constant bounds through the domain itself
        rng = {}
        for k, v in dom.items():
            var = k.var if isinstance(k, IterVar) else k
            iv2 = Interval.from_range(v) if isinstance(v, Range) else v
            rng[var] = (_const(iv2.min), _const(iv2.max))
        s = Simplifier(rng)
        blo = s.bound(s.visit(convert(e))) if lo is None else (lo, lo)
        bhi = s.bound(s.visit(convert(e))) if hi is None else (hi, hi)
        if math.isinf(blo[0]) or math.isinf(bhi[1]):
            raise ExprError(f"{e} has no constant bounds over the given domain "
                            f"(got [{iv.min}, {iv.max}])")
        lo, hi = int(blo[0]), int(bhi[1])
    return lo, hi


def union(a: Interval, b: Interval) -> Interval:
    """The smallest interval containing both (endpoints as simplified min/max)."""
    s = Simplifier()
    lo = None if a.min is None or b.min is None else s.visit(binary(BinOpKind.MIN, a.min, b.min))
    hi = None if a.max is None or b.max is None else s.visit(binary(BinOpKind.MAX, a.max, b.max))
    return Interval(lo, hi)
