"""The arithmetic rules of the simplifier, applied to already simplified operands.

:class:`SimplifyRules` holds the rewrite rules proper (linear arithmetic, floor division and
modulo, ``min``/``max``, comparisons, logic, float identities); the traversal, memo tables and
variable ranges stay in :class:`~templtune.te.simplify.Simplifier`, which mixes these in. The
rules need only the linear forms and bounds of :class:`~templtune.te.linear.LinearForms`.
"""

from __future__ import annotations

import math

from templtune import dtype as dt
from templtune.te.expr import BinOp, BinOpKind, FloatImm, IntImm, PrimExpr
from templtune.te.linear import Lin, LinearForms, is_lin_dtype

__all__ = ["SimplifyRules"]


class SimplifyRules(LinearForms):
    """Rewrite rules on simplified operands; every integer rule follows floor semantics."""

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
                ln, c = Lin(ln.const // g, {k: [x, co // g] for k, (x, co) in ln.terms.items()}), c // g
                if c == 1:
                    return self.from_lin(ln, dtype)
            q = Lin(ln.const // c)
            r = Lin(ln.const % c)
            for k, (x, co) in ln.terms.items():
                (q if co % c == 0 else r).terms[k] = [x, co // c if co % c == 0 else co]
            lo, hi = self.lin_bound(r)
            if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
                q.const += int(lo // c)
                return self.from_lin(q, dtype)
            if not r.terms:
                return self.from_lin(q, dtype)
            sp = self._split_small(r, c)
            if sp is not None:  # (g*A + B) // (g*c') == A // c' when 0 <= B < g
                g2, big, _ = sp
                rest = self._divmod(op, self.from_lin(big, dtype), c // g2, dtype)
            else:
                rest = BinOp(BinOpKind.FLOORDIV, self.from_lin(r, dtype), IntImm(dtype, c),
                             dtype)
            return self.from_lin(q.add(self.lin(rest)), dtype)
        # floormod: terms with coefficients divisible by c vanish; if the rest lies in one
        # period it is the answer, otherwise coefficients and constant reduce modulo c
        r1 = Lin(ln.const % c, {k: [x, co] for k, (x, co) in ln.terms.items() if co % c})
        lo, hi = self.lin_bound(r1)
        if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
            return self.from_lin(r1.add(Lin(-int(lo // c) * c)), dtype)
        r = Lin(ln.const % c)
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
            return self.from_lin(r.add(Lin(-int(lo // c) * c)), dtype)
        sp = self._split_small(r, c)
        if sp is not None:  # (g*A + B) % (g*c') == g*(A % c') + B when 0 <= B < g
            g2, big, small = sp
            m = self._divmod(op, self.from_lin(big, dtype), c // g2, dtype)
            return self.from_lin(self.lin(m).scale(g2).add(small), dtype)
        if g > 1:  # (g*A) % (g*B) == g * (A % B)
            inner = Lin(r.const // g, {k: [x, co // g] for k, (x, co) in r.terms.items()})
            m = self._divmod(op, self.from_lin(inner, dtype), c // g, dtype)
            return self.from_lin(self.lin(m).scale(g), dtype)
        return BinOp(BinOpKind.FLOORMOD, self.from_lin(r, dtype), IntImm(dtype, c), dtype)

    def _split_small(self, ln: Lin, c: int) -> tuple[int, Lin, Lin] | None:
        """Find ``g | c`` (1 < g < c) with ``ln == g*big + small`` and ``0 <= small < g``."""
        cands = sorted({math.gcd(c, co) for _, co in ln.terms.values()} - {1, c}, reverse=True)
        for g in cands:
            big = Lin(ln.const // g)
            small = Lin(ln.const % g)
            for k, (x, co) in ln.terms.items():
                if co % g == 0:
                    big.terms[k] = [x, co // g]
                else:
                    small.terms[k] = [x, co]
            if not big.terms:
                continue
            lo, hi = self.lin_bound(small)
            if lo >= 0 and hi <= g - 1:
                return g, big, small
        return None

    def _minmax(self, op: BinOpKind, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        if self.key(a) == self.key(b):
            return a
        if is_lin_dtype(dtype):
            lo, hi = self.lin_bound(self.lin(a).add(self.lin(b), -1))
            if hi <= 0:
                return a if op is BinOpKind.MIN else b
            if lo >= 0:
                return b if op is BinOpKind.MIN else a
        return BinOp(op, a, b, dtype)

    def _compare(self, op: BinOpKind, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        if is_lin_dtype(a.dtype) and is_lin_dtype(b.dtype):
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
