"""Property tests: stride analysis against numeric finite differences; SA result invariants."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune.autotvm.feature.loops import linear_form
from templtune.te.expr import BinOp, BinOpKind, IntImm, Var

VARS = [Var("a"), Var("b"), Var("c")]


def _c(v: int) -> IntImm:
    return IntImm("int32", v)


@st.composite
def affine(draw, depth=3):
    """A random expression over VARS built from +, -, *const, and occasionally // or %."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return VARS[draw(st.integers(0, 2))]
        return _c(draw(st.integers(-5, 5)))
    op = draw(st.sampled_from(["add", "sub", "mul", "div", "mod"]))
    a = draw(affine(depth=depth - 1))
    if op in ("add", "sub"):
        b = draw(affine(depth=depth - 1))
        return BinOp(BinOpKind.ADD if op == "add" else BinOpKind.SUB, a, b, "int32")
    k = _c(draw(st.integers(1, 7)))
    kind = {"mul": BinOpKind.MUL, "div": BinOpKind.FLOORDIV, "mod": BinOpKind.FLOORMOD}[op]
    return BinOp(kind, a, k, "int32") if draw(st.booleans()) or op != "mul" else \
        BinOp(kind, k, a, "int32")


def _eval(e, env):
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, IntImm):
        return e.value
    a, b = _eval(e.a, env), _eval(e.b, env)
    return {BinOpKind.ADD: lambda: a + b, BinOpKind.SUB: lambda: a - b,
            BinOpKind.MUL: lambda: a * b, BinOpKind.FLOORDIV: lambda: a // b,
            BinOpKind.FLOORMOD: lambda: a % b}[e.op]()


@settings(max_examples=150, deadline=None)
@given(affine(), st.lists(st.integers(-20, 20), min_size=3, max_size=3))
def test_linear_coefficients_match_finite_differences(e, point):
    coeffs, nonlinear = linear_form(e, {})
    env = dict(zip(VARS, point))
    for v in VARS:
        if v in nonlinear:
            continue
        bumped = dict(env)
        bumped[v] += 1
        assert _eval(e, bumped) - _eval(e, env) == coeffs.get(v, 0)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 20), st.lists(st.integers(0, 999), max_size=30))
def test_sa_results_distinct_valid_and_exclusive(seed, num, excl):
    from test_sa_optimizer import ScoreModel
    from test_xgb_fixtures import SynthTask

    from templtune.autotvm.tuner.sa_model_optimizer import SimulatedAnnealingOptimizer

    task = SynthTask(dims=(4, 5, 6, 7))
    opt = SimulatedAnnealingOptimizer(task, n_iter=15, parallel_size=16, seed=seed)
    out = opt.find_maximums(ScoreModel(task.config_space), num, set(excl))
    assert len(out) == len(set(out)) <= num
    assert not set(out) & set(excl)
    assert all(0 <= i < len(task.config_space) for i in out)
    scores = ScoreModel(task.config_space).predict(out)
    assert np.all(np.diff(scores) <= 1e-12)
