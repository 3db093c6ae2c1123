"""Symbolic shapes end to end on LLVM: ``te.var`` extents through bound inference, tail guards,
lowering with shape arguments, and built functions that take arrays of any size, under hand
schedules (splits, tiles, caches, compute_at / inline, a transpose, a matmul) and
hypothesis-drawn splits; numpy is the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from symbolic_shapes_helpers import SIZES, _check_sizes, _matmul, _run_matmul, _vector_add

import templtune as tvm
from templtune import te


def test_split_by_64_guards_the_tail():
    A, B, C = _vector_add()
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=64)
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "for (i.outer: int32, 0, floordiv((n + 63), 64))" in text
    assert "for (i.inner: int32, 0, 64)" in text
    assert "if @tir.likely((((i.outer * 64) + i.inner) < n), dtype=bool)" in text
    f = tvm.build(s, [A, B, C], "llvm")
    assert "define i32" in f.get_source() and "i32 %sv0" in f.get_source()
    _check_sizes(f, tvm.cpu(0), SIZES + (64, 65, 127, 128))


def test_split_of_constant_extent_unchanged():
    # the static path keeps its shape: no shape arguments, no guard for a dividing split
    A = te.placeholder((128,), name="A")
    C = te.compute((128,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=64)
    text = str(tvm.lower(s, [A, C]))
    assert "likely" not in text and "for (i.outer: int32, 0, 2)" in text
    assert "%sv0" not in tvm.build(s, [A, C], "llvm").get_source()


MM_SHAPES = ((5, 7, 3), (64, 33, 17), (1, 1, 1), (16, 32, 8))


def test_symbolic_matmul_tiled_vectorized_parallel():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    xo, yo, xi, yi = s[C].tile(i, j, 8, 16)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(xo, yo, ko, ki, xi, yi)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    text = str(tvm.lower(s, [A, B, C]))
    assert "floordiv((l + 3), 4)" in text and "< l)" in text
    _run_matmul(tvm.build(s, [A, B, C], "llvm"), MM_SHAPES)


def test_symbolic_matmul_cache_write_compute_at():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[CC].compute_at(s[C], yo)
    text = str(tvm.lower(s, [A, B, C]))
    # the cached tile has a constant size; its points past the symbolic end are skipped
    assert "allocate(C.global: Pointer(global float32), float32, [128])" in text
    assert "< n)" in text and "< m)" in text
    _run_matmul(tvm.build(s, [A, B, C], "llvm"), MM_SHAPES)


def test_symbolic_transpose_tiled():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    T = te.compute((m, n), lambda i, j: A[j, i], name="T")
    s = te.create_schedule(T.op)
    s[T].tile(T.op.axis[0], T.op.axis[1], 4, 8)
    f = tvm.build(s, [A, T], "llvm")
    rng = np.random.default_rng(2)
    for a, b in ((3, 5), (17, 9), (1, 1), (32, 8)):
        x = rng.standard_normal((a, b)).astype("float32")
        y = np.zeros((b, a), "float32")
        f(x, y)
        np.testing.assert_array_equal(y, x.T)


def _chain():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    return A, B, C


def _sched_inline(s, A, B, C):
    s[B].compute_inline()
    fused = s[C].fuse(*C.op.axis)
    xo, xi = s[C].split(fused, 8)
    s[C].parallel(xo)
    s[C].vectorize(xi)


def _sched_root(s, A, B, C):
    pass  # B gets a heap buffer of n*m elements


def _sched_compute_at_tile(s, A, B, C):
    xo, yo, xi, yi = s[C].tile(*C.op.axis, 4, 8)
    s[B].compute_at(s[C], yo)


def _sched_cache_read_at(s, A, B, C):
    AL = s.cache_read(A, "local", [B])
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[B].compute_at(s[C], xo)
    s[AL].compute_at(s[C], xo)


def _sched_nparts_unroll(s, A, B, C):
    xo, xi = s[C].split(C.op.axis[1], nparts=4)
    s[C].unroll(xi)


@pytest.mark.parametrize("sched", [_sched_inline, _sched_root, _sched_compute_at_tile,
                                   _sched_cache_read_at, _sched_nparts_unroll],
                         ids=lambda f: f.__name__[7:])
def test_symbolic_producer_consumer_schedules(sched):
    A, B, C = _chain()
    s = te.create_schedule(C.op)
    sched(s, A, B, C)
    f = tvm.build(s, [A, C], "llvm")
    rng = np.random.default_rng(4)
    for shape in ((3, 5), (17, 33), (1, 1), (0, 4), (64, 64)):
        a = rng.standard_normal(shape).astype("float32")
        c = np.full(shape, np.nan, "float32")
        f(a, c)
        np.testing.assert_allclose(c, a * 2.0 + 1.0, rtol=1e-6)


_PROPS = settings(max_examples=12, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])


@_PROPS
@given(factor=st.integers(1, 17), parallel=st.booleans(), vec=st.booleans(),
       sizes=st.lists(st.integers(0, 300), min_size=1, max_size=4))
def test_property_symbolic_elementwise(factor, parallel, vec, sizes):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    if parallel:
        s[B].parallel(xo)
    if vec:
        s[B].vectorize(xi)
    f = tvm.build(s, [A, B], "llvm")
    rng = np.random.default_rng(factor)
    for size in sizes:
        a = rng.standard_normal(size).astype("float32")
        b = np.full(size, np.nan, "float32")
        f(a, b)
        np.testing.assert_allclose(b, a * 3.0 + 1.0, rtol=1e-5, atol=1e-6)  # FMA contraction


@_PROPS
@given(fi=st.integers(1, 9), fk=st.integers(1, 9), reorder=st.booleans(),
       shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1,
                       max_size=3))
def test_property_symbolic_reduction(fi, fk, reorder, shapes):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=fi)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=fk)
    if reorder:
        s[B].reorder(io, ko, ki, ii)
    f = tvm.build(s, [A, B], "llvm")
    rng = np.random.default_rng(fi * 10 + fk)
    for rows, cols in shapes:
        a = rng.standard_normal((rows, cols)).astype("float32")
        b = np.full(rows, np.nan, "float32")
        f(a, b)
        np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-4, atol=1e-4)
