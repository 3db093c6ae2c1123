"""Symbolic shapes: what calls and declarations refuse, by name. Arrays that disagree on a shape
variable or its dtype, a variable shared by two dims, compound or unbound symbolic dims, float
shapes (integral ones are converted) and a size beyond int32."""

from __future__ import annotations

import numpy as np
import pytest
from symbolic_shapes_helpers import _vector_add

import templtune as tvm
from templtune import te
from templtune.errors import ExprError, LoweringError, RuntimeCallError


def test_mismatched_arrays_are_named():
    A, B, C = _vector_add()
    s = te.create_schedule(C.op)
    f = tvm.build(s, [A, B, C], "llvm", name="myadd")
    z3, z4 = np.zeros(3, "float32"), np.zeros(4, "float32")
    with pytest.raises(RuntimeCallError, match=r"\(A\) and 1 \(B\) of myadd disagree on n: "
                                               r"A.shape\[0\] = 3 but B.shape\[0\] = 4"):
        f(z3, z4, z3)
    with pytest.raises(RuntimeCallError, match=r"\(A\) and 2 \(C\) .*disagree on n"):
        f(z3, z3, z4)
    with pytest.raises(RuntimeCallError, match=r"B\) of myadd has shape \(3, 1\), expected 1 "
                                               r"dimensions"):
        f(z3, np.zeros((3, 1), "float32"), z3)
    with pytest.raises(RuntimeCallError, match=r"C\) of myadd has dtype float64, expected "
                                               r"float32"):
        f(z3, z3, np.zeros(3))


def test_shape_var_shared_by_two_dims_is_checked():
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    T = te.compute((n, n), lambda i, j: A[j, i], name="T")
    f = tvm.build(te.create_schedule(T.op), [A, T], "llvm")
    x = np.arange(9, dtype="float32").reshape(3, 3)
    y = np.zeros((3, 3), "float32")
    f(x, y)
    np.testing.assert_array_equal(y, x.T)
    with pytest.raises(RuntimeCallError, match=r"shape \(3, 4\), but its axes 0 and 1 are both n"):
        f(np.zeros((3, 4), "float32"), np.zeros((3, 4), "float32"))


def test_compound_symbolic_argument_dimension_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n + 1,), lambda i: A[i - 1], name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(LoweringError, match="compound symbolic dimension"):
        tvm.lower(s, [A, B])


def test_var_not_in_any_argument_shape_is_refused():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * m, name="B")
    with pytest.raises(LoweringError, match="variable m .*whole dimension of an argument"):
        tvm.lower(te.create_schedule(B.op), [A, B])


def test_integral_float_shapes_are_converted():
    # the tutorial's array packing: ``N / bn`` is a float in Python 3
    N, K, bn = 64, 16, 32
    B = te.placeholder((K, N), name="B")
    packedB = te.compute((N / bn, K, bn), lambda bigN, k, littleN: B[k, bigN * bn + littleN],
                         name="packedB")
    assert [int(x) for x in packedB.shape] == [2, 16, 32]
    assert all(x.dtype == "int32" for x in packedB.shape)
    A = te.placeholder((N / bn, 8.0), name="A")
    assert [int(x) for x in A.shape] == [2, 8]
    s = te.create_schedule(packedB.op)
    f = tvm.build(s, [B, packedB], "llvm")
    b = np.random.default_rng(3).standard_normal((K, N)).astype("float32")
    out = np.zeros((2, K, bn), "float32")
    f(b, out)
    np.testing.assert_array_equal(out, b.reshape(K, 2, bn).transpose(1, 0, 2))
    assert int(te.reduce_axis((0, K / 2)).dom.extent) == 8


@pytest.mark.parametrize("bad", [2.5, 64 / 3, float("nan"), float("inf")])
def test_fractional_float_shapes_are_refused(bad):
    with pytest.raises(ExprError, match=r"shape\[1\] = .* is not an integral value"):
        te.placeholder((4, bad), name="A")
    with pytest.raises(ExprError, match="is not an integral value"):
        te.compute((bad,), lambda i: i, name="C")


def test_shape_beyond_int32_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype="int8")
    C = te.compute((n,), lambda i: A[i], name="C")
    f = tvm.build(te.create_schedule(C.op), [A, C], "llvm")
    big = np.empty(2**31, "int8")  # untouched pages: no physical memory is used
    with pytest.raises(RuntimeCallError, match="n = 2147483648 does not fit its dtype int32"):
        f(big, big)
