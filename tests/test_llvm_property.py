"""Property test: random expression trees compiled by the LLVM backend agree with numpy."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from templtune import dtype as dt
from templtune.build_module import build
from templtune.codegen.llvm.testing import elementwise
from templtune.te.expr import BinOp, BinOpKind, Cast, Select, const

N = 32
_INT_OPS = {
    "add": (BinOpKind.ADD, np.add), "sub": (BinOpKind.SUB, np.subtract),
    "mul": (BinOpKind.MUL, np.multiply), "min": (BinOpKind.MIN, np.minimum),
    "max": (BinOpKind.MAX, np.maximum),
}


def _bin(op, a, b):
    # a node of the wider operand's lanes; the renderer broadcasts the scalar side
    d = a.dtype if dt.lanes(a.dtype) >= dt.lanes(b.dtype) else b.dtype
    if op in (BinOpKind.LT,):
        d = dt.with_lanes("bool", dt.lanes(d))
    return BinOp(op, a, b, d)


def _cast(to, e):
    return Cast(dt.with_lanes(to, dt.lanes(e.dtype)), e)


def _leaf(dtype):
    consts = st.integers(-9, 9) if dtype == "int32" else st.floats(-4, 4, width=32)
    return st.one_of(
        st.sampled_from([0, 1]).map(lambda k: (lambda a, b, k=k: (a, b)[k],
                                               lambda x, y, k=k: (x, y)[k])),
        consts.map(lambda c: (lambda a, b, c=c: const(c, dtype),
                              lambda x, y, c=c: np.full(N, c, dtype))),
    )


def _tree(dtype):
    def extend(children):
        binop = st.tuples(st.sampled_from(sorted(_INT_OPS)), children, children).map(
            lambda t: (lambda a, b: _bin(_INT_OPS[t[0]][0], t[1][0](a, b), t[2][0](a, b)),
                       lambda x, y: _INT_OPS[t[0]][1](t[1][1](x, y), t[2][1](x, y)).astype(dtype)))
        sel = st.tuples(children, children, children, children).map(
            lambda t: (lambda a, b: Select(_bin(BinOpKind.LT, t[0][0](a, b), t[1][0](a, b)),
                                           t[2][0](a, b), t[3][0](a, b)),
                       lambda x, y: np.where(t[0][1](x, y) < t[1][1](x, y), t[2][1](x, y),
                                             t[3][1](x, y)).astype(dtype)))
        parts = [binop, sel]
        if dtype == "int32":
            div = st.tuples(st.sampled_from([1, 2, 3, 4, 7, -3, -8]), children,
                            st.booleans()).map(
                lambda t: (lambda a, b: _bin(BinOpKind.FLOORDIV if t[2] else BinOpKind.FLOORMOD,
                                         t[1][0](a, b), const(t[0], 'int32')),
                           lambda x, y: (np.floor_divide(t[1][1](x, y), t[0]) if t[2]
                                         else np.mod(t[1][1](x, y), t[0])).astype(dtype)))
            parts.append(div)
        else:
            cast = children.map(lambda c: (lambda a, b: _cast("float32", _cast("int32", c[0](a, b))),
                                           lambda x, y: c[1](x, y).astype("int32")
                                           .astype("float32")))
            parts.append(cast)
        return st.one_of(*parts)

    return st.recursive(_leaf(dtype), extend, max_leaves=8)


def _check(tree, dtype, lanes, seed):
    build_fn, ref_fn = tree
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        x, y = (rng.integers(-50, 50, N).astype(dtype) for _ in range(2))
    else:
        x, y = (rng.uniform(-4, 4, N).astype(dtype) for _ in range(2))
    f = elementwise(lambda a, b: build_fn(a, b), [dtype, dtype], dtype, N, lanes=lanes)
    mod = build(f)
    out = np.zeros(N, dtype)
    mod(x, y, out)
    with np.errstate(all="ignore"):
        ref = np.broadcast_to(ref_fn(x, y), (N,)).astype(dtype)
    if dtype == "int32":
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_tree("int32"), lanes=st.sampled_from([1, 4, 8]), seed=st.integers(0, 2**16))
def test_random_int_expressions(tree, lanes, seed):
    _check(tree, "int32", lanes, seed)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_tree("float32"), lanes=st.sampled_from([1, 8, 16]), seed=st.integers(0, 2**16))
def test_random_float_expressions(tree, lanes, seed):
    _check(tree, "float32", lanes, seed)
