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
from collections.abc import Mapping
from typing import Any

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.construct import _fold
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
    cast,
    const,
)
from templtune.te.functor import Mutator, handles
from templtune.te.linear import _LIN_DTYPES, INF, Bound, Lin, is_lin_dtype
from templtune.te.simplify_rules import SimplifyRules

__all__ = ["simplify", "can_prove", "const_bound", "Simplifier"]

# NOTE: a tuple, not a set: membership of enum members by identity skips Enum.__hash__
_LIN_OPS = (BinOpKind.ADD, BinOpKind.SUB, BinOpKind.MUL)
_FLIP = {BinOpKind.LT: BinOpKind.GE, BinOpKind.LE: BinOpKind.GT, BinOpKind.GT: BinOpKind.LE,
         BinOpKind.GE: BinOpKind.LT, BinOpKind.EQ: BinOpKind.NE, BinOpKind.NE: BinOpKind.EQ}
_CMP_OPS = tuple(_FLIP)


class Simplifier(SimplifyRules, Mutator):
    """One simplification context: variable ranges plus memo tables (by node identity).

    Reuse one instance to simplify many expressions under the same ranges cheaply."""

    def __init__(self, ranges: Mapping[Any, Any] | None = None) -> None:
        rb = self._range_bound
        self.ranges: dict[Var, Bound] = {
            (v.var if isinstance(v, IterVar) else v): rb(r) for v, r in (ranges or {}).items()}
        self._memo: dict[Any, Any] = {}
        self._keys: dict[Any, Any] = {}
        self._lins: dict[Any, Lin] = {}
        self._bounds: dict[Any, Bound] = {}

    def set_range(self, var: Var | IterVar, r: Any) -> None:
        """Add (or change) the range of ``var``. Memo tables are dropped when ``var`` was already
        seen, so earlier answers computed without the fact never go stale."""
        v = var.var if isinstance(var, IterVar) else var
        self.ranges[v] = self._range_bound(r)
        if v in self._memo or v in self._bounds:
            self._memo.clear()
            self._bounds.clear()
            self._lins.clear()

    def _range_bound(self, r: Any) -> Bound:
        if type(r) is tuple and len(r) == 2 and type(r[0]) is int and type(r[1]) is int:
            return r  # the common case (loop ranges from bound inference): already (lo, hi)
        if isinstance(r, Range):
            mn, ext = Simplifier().visit(r.min), Simplifier().visit(r.extent)
            if isinstance(mn, IntImm) and isinstance(ext, IntImm):
                return mn.value, mn.value + ext.value - 1
            if isinstance(mn, IntImm):
                return mn.value, INF
            return -INF, INF
        if isinstance(r, tuple) and len(r) == 2:  # inclusive (lo, hi)
            lo, hi = r
            lo = -INF if lo is None or lo == -INF else int(lo)
            hi = INF if hi is None or hi == INF else int(hi)
            return lo, hi
        lo_e, hi_e = getattr(r, "min", None), getattr(r, "max", None)  # bound.Interval
        lo = lo_e.value if isinstance(lo_e, IntImm) else -INF
        hi = hi_e.value if isinstance(hi_e, IntImm) else INF
        return lo, hi

    # ------------------------------------------------------------------------ memo + keys

    def visit(self, node: Any) -> Any:
        t = type(node)
        if t is IntImm or t is FloatImm:
            return node  # NOTE: constants are final (the generic walk returned them as they are)
        r = self._memo.get(node)
        if r is None:
            # NOTE: Mutator.visit inlined (this is the hottest call of lowering)
            r = self._dispatch.lookup(t)(self, node)  # type: ignore[misc]
            self._memo[node] = r
            self._memo[r] = r
        return r

    # ----------------------------------------------------------------------------- visitors

    def simplify_loop(self, node: Any) -> Any:
        """Loop-IR ``For``: a loop with constant bounds gives its variable a range inside the
        body. Statements live in a higher layer, which registers this handler for its ``For``
        (``Simplifier.register_handler``)."""
        mn, ext = self.visit(node.min), self.visit(node.extent)
        v = node.loop_var
        if isinstance(mn, IntImm) and isinstance(ext, IntImm) and ext.value > 0:
            # NOTE: the range holds only inside the body, and a variable may be reused by
            # another loop with other bounds: simplify the body with fresh memo tables and
            # restore the outer state afterwards.
            saved = (self.ranges.get(v), self._memo, self._bounds, self._lins)
            self._memo, self._bounds, self._lins = {}, {}, {}
            self.ranges[v] = (mn.value, mn.value + ext.value - 1)
            try:
                body = self.visit(node.body)
            finally:
                old, self._memo, self._bounds, self._lins = saved
                if old is None:
                    del self.ranges[v]
                else:
                    self.ranges[v] = old
        else:
            body = self.visit(node.body)
        if mn is node.min and ext is node.extent and body is node.body:
            return node
        return dataclasses.replace(node, min=mn, extent=ext, body=body)

    @handles(Var)
    def visit_Var(self, node: Var) -> PrimExpr:
        b = self.ranges.get(node)
        if b is not None and b[0] == b[1]:
            return IntImm(node.dtype, int(b[0]))
        return node

    @handles(Cast)
    def visit_Cast(self, node: Cast) -> PrimExpr:
        v = self.visit(node.value)
        if v.dtype == node.dtype:
            return v
        if isinstance(v, (IntImm, FloatImm)):
            return cast(node.dtype, v)
        return node if v is node.value else Cast(node.dtype, v)

    @handles(Not)
    def visit_Not(self, node: Not) -> PrimExpr:
        a = self.visit(node.a)
        if isinstance(a, IntImm):
            return const(not a.value, node.dtype)
        if isinstance(a, Not):
            return a.a
        if isinstance(a, BinOp) and a.op in _FLIP and is_lin_dtype(a.a.dtype):
            return self._compare(_FLIP[a.op], a.a, a.b, a.dtype)
        return node if a is node.a else Not(a, node.dtype)

    @handles(Select)
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

    @handles(Call)
    def visit_Call(self, node: Call) -> PrimExpr:
        args = tuple(self.visit(a) for a in node.args)
        if node.name == "likely" and len(args) == 1 and isinstance(args[0], IntImm):
            return args[0]
        if all(x is y for x, y in zip(args, node.args)):
            return node
        return Call(node.dtype, node.name, args)

    @handles(TensorLoad)
    def visit_TensorLoad(self, node: TensorLoad) -> PrimExpr:
        idx = tuple(self.visit(i) for i in node.indices)
        if all(x is y for x, y in zip(idx, node.indices)):
            return node
        return TensorLoad(node.tensor, idx)

    def _collect(self, e: PrimExpr) -> Lin:
        """Linear form of an unsimplified +/-/*const tree, simplifying only its atoms."""
        return self._collect_owned(e)[0]

    def _collect_owned(self, e: PrimExpr) -> tuple[Lin, bool]:
        """:meth:`_collect` plus whether the form is new (``True``: the caller may change it in
        place) or a memoized atom's form (``False``: shared, never to be changed)."""
        if type(e) is BinOp and e.dtype in _LIN_DTYPES and e.op in _LIN_OPS \
                and e not in self._memo:
            op = e.op
            if op is BinOpKind.ADD or op is BinOpKind.SUB:
                # NOTE: a +/- chain extends one form in place instead of copying the growing
                # form at every node (Lin.iadd keeps Lin.add's term order and zero removal)
                left, owned = self._collect_owned(e.a)
                right = self._collect_owned(e.b)[0]
                if not owned:
                    left = left.copy()
                return left.iadd(right, 1 if op is BinOpKind.ADD else -1), True
            if isinstance(e.b, IntImm):
                return self._collect_owned(e.a)[0].scale(e.b.value), True
            if isinstance(e.a, IntImm):
                return self._collect_owned(e.b)[0].scale(e.a.value), True
        return self.lin(self.visit(e)), False

    @handles(BinOp)
    def visit_BinOp(self, node: BinOp) -> PrimExpr:
        op, dtype = node.op, node.dtype
        if op in _LIN_OPS and is_lin_dtype(dtype) and (
                op is not BinOpKind.MUL or isinstance(node.a, IntImm)
                or isinstance(node.b, IntImm)):
            # NOTE: a whole +/- chain becomes one linear form, built once (not per node)
            return self.from_lin(self._collect(node), dtype)
        a, b = self.visit(node.a), self.visit(node.b)
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            try:
                r = _fold(op, a, b)
            except ExprError:  # division by a constant zero: leave it for the user to see
                r = None
            if r is not None:
                return r
        if op in _LIN_OPS and is_lin_dtype(dtype):
            return self._linear(op, a, b, dtype)
        if op in (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD) and is_lin_dtype(dtype) \
                and isinstance(b, IntImm) and b.value > 0:
            return self._divmod(op, a, b.value, dtype)
        if op is BinOpKind.DIV and is_lin_dtype(dtype) and isinstance(b, IntImm) \
                and b.value > 0 and self.bound(a)[0] >= 0:
            # truncated division of a non-negative value is floor division
            return self._divmod(BinOpKind.FLOORDIV, a, b.value, dtype)
        if op in (BinOpKind.MIN, BinOpKind.MAX):
            return self._minmax(op, a, b, dtype)
        if op in _CMP_OPS:
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
