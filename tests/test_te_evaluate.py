"""te.evaluate (vectorised numpy) agrees with point-by-point scalar evaluation (eval_const)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune import te
from templtune.te.const_eval import eval_const
from templtune.te.evaluate import evaluate
from templtune.te.expr import BinOpKind, IntImm, Select, Var, binary, const
from templtune.te.functor import substitute

VA, VB, VK = Var("a"), Var("b"), Var("k")
N0, N1, NK = 4, 5, 3


def int_expr(vars_):
    leaf = st.one_of(st.sampled_from(vars_), st.integers(-7, 7).map(const))
    ops = st.sampled_from([BinOpKind.ADD, BinOpKind.SUB, BinOpKind.MUL, BinOpKind.FLOORDIV,
                           BinOpKind.FLOORMOD, BinOpKind.MIN, BinOpKind.MAX, BinOpKind.LT])

    def extend(children):
        def build(t):
            op, x, y, c = t
            if op is BinOpKind.LT:
                return Select(binary(BinOpKind.LT, x, y), x, y)
            if op in (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD):
                return binary(op, x, c)
            if op is BinOpKind.MUL and not isinstance(y, IntImm):
                return binary(op, x, c)
            return binary(op, x, y)

        return st.tuples(ops, children, children, st.integers(1, 6)).map(build)

    return st.recursive(leaf, extend, max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(int_expr([VA, VB]))
def test_elementwise_int_matches_scalar(e):
    out = te.compute((N0, N1), lambda i, j: substitute(e, {VA: i.var, VB: j.var}), name="out")
    got, = evaluate(out, {})
    for i, j in itertools.product(range(N0), range(N1)):
        assert got[i, j] == eval_const(e, {VA: i, VB: j}), (str(e), i, j)


@settings(max_examples=60, deadline=None)
@given(int_expr([VA, VB]), int_expr([VA, VB, VK]))
def test_guarded_loads_and_reduction_match_scalar(idx, idx2):
    """A[idx] guarded by 0 <= idx < 6 (padding-style), then a sum over k of such loads."""
    A = te.placeholder((6, N1), name="A")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, N1)).astype("float32")

    def guarded(ix, j):
        return te.if_then_else(te.all(ix >= 0, ix < 6), A[ix, j], te.const(0.5))

    P = te.compute((N0, N1), lambda i, j: guarded(substitute(idx, {VA: i.var, VB: j.var}), j),
                   name="P")
    k = te.reduce_axis((0, NK), name="k")
    S = te.compute((N0, N1), lambda i, j: te.sum(
        guarded(substitute(idx2, {VA: i.var, VB: j.var, VK: k.var}), j), axis=k), name="S")
    p, s = evaluate([P, S], {A: a})
    for i, j in itertools.product(range(N0), range(N1)):
        want_p = eval_const(guarded(idx, VB), {VA: i, VB: j}, {A: a})
        assert np.isclose(p[i, j], want_p), (str(idx), i, j)
        want_s = sum(eval_const(guarded(idx2, VB), {VA: i, VB: j, VK: kk}, {A: a})
                     for kk in range(NK))
        assert np.isclose(s[i, j], want_s, rtol=1e-5, atol=1e-6), (str(idx2), i, j)
