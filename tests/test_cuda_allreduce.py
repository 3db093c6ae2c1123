"""Cross-thread reduction (reduce axis bound to threadIdx): race-free all-reduce, numpy oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import templtune
from templtune import te
from templtune.codegen.cuda.compile import find_nvcc
from templtune.runtime.cuda.emulate import emulate, run_module

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


def _row_reduce(rows: int, n: int, nthreads: int, kind: str = "sum"):
    A = te.placeholder((rows, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[kind]
    B = te.compute((rows,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=nthreads)
    BF = s.rfactor(B, ki)
    tx = s[B].op.reduce_axis[0]
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[BF].compute_at(s[B], tx)
    return s, A, B


def _two_d_threads(rows: int = 8, n: int = 64):
    """Row sums with rows on threadIdx.y (4 per block) and the reduction on threadIdx.x (16)."""
    A = te.placeholder((rows, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    io, ii = s[B].split(s[B].op.axis[0], factor=4)
    tx = s[B].op.reduce_axis[0]
    s[B].reorder(io, ii, tx)
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[BF].compute_at(s[B], tx)
    return s, A, B


def _direct_bound(kind: str, rows: int = 3, n: int = 100, nthreads: int = 32):
    """The auto-scheduler's CrossThreadReduction form: split the reduction and bind its inner
    part to threadIdx.x without rfactor (a non-dividing split adds a guard)."""
    A = te.placeholder((rows, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    red = te.sum if kind == "sum" else te.min
    B = te.compute((rows,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=nthreads)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))  # TVM allows this without rfactor
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    return s, A, B


@pytest.mark.parametrize("nthreads", [32, 64, 128, 48])
def test_row_sum_rfactor_bound_to_threads(nthreads):
    n = nthreads * 3
    s, A, B = _row_reduce(5, n, nthreads)
    m = templtune.build(s, [A, B], target="cuda")
    src = m.get_source()
    assert "__shared__" in src and "__syncthreads()" in src and "red_buf0" in src
    assert m.launches[0].block == (nthreads, 1, 1)
    # the racy form (every thread accumulating into B) is gone: one thread stores the total
    assert "if ((((int)threadIdx.x) == 0))" in src
    rng = np.random.default_rng(nthreads)
    a = rng.random((5, n), dtype=np.float32)
    b = np.zeros(5, "float32")
    run_module(m, [a, b])
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_row_max_min(kind):
    s, A, B = _row_reduce(4, 96, 48, kind)
    f = templtune.lower(s, [A, B])
    a = np.random.default_rng(0).standard_normal((4, 96)).astype("float32")
    b = np.zeros(4, "float32")
    emulate(f, a, b)
    np.testing.assert_allclose(b, getattr(a, kind)(1))


def test_softmax_style_two_reductions():
    rows, n, nt = 4, 64, 32
    A = te.placeholder((rows, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    M = te.compute((rows,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((rows, n), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, n), name="k2")
    S = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((rows, n), lambda i, j: E[i, j] / S[i], name="Y")
    s = te.create_schedule(Y.op)
    s[E].compute_inline()
    for R in (M, S):
        _, ki = s[R].split(R.op.reduce_axis[0], factor=nt)
        RF = s.rfactor(R, ki)
        s[R].bind(s[R].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
        s[R].bind(s[R].op.axis[0], te.thread_axis("blockIdx.x"))
        s[RF].compute_at(s[R], s[R].op.reduce_axis[0])
    yo, yi = s[Y].split(Y.op.axis[1], factor=nt)
    s[Y].bind(Y.op.axis[0], te.thread_axis("blockIdx.x"))
    s[Y].bind(yi, te.thread_axis("threadIdx.x"))
    f = templtune.lower(s, [A, Y])
    a = np.random.default_rng(2).standard_normal((rows, n)).astype("float32")
    y = np.zeros((rows, n), "float32")
    emulate(f, a, y)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_dense_batch1_matvec_rfactor():
    n, m_out, nt = 96, 6, 48
    A = te.placeholder((1, n), name="A")
    W = te.placeholder((m_out, n), name="W")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((1, m_out), lambda i, j: te.sum(A[i, k] * W[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, _ = s[C].split(C.op.reduce_axis[0], nparts=nt)
    CF = s.rfactor(C, ko)
    s[C].bind(s[C].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[C].bind(s[C].op.axis[1], te.thread_axis("blockIdx.x"))
    s[CF].compute_at(s[C], s[C].op.reduce_axis[0])
    m = templtune.build(s, [A, W, C], target="cuda")
    rng = np.random.default_rng(3)
    a = rng.random((1, n), dtype=np.float32)
    w = rng.random((m_out, n), dtype=np.float32)
    c = np.zeros((1, m_out), "float32")
    run_module(m, [a, w, c])
    np.testing.assert_allclose(c, a @ w.T, rtol=1e-5)


def test_two_dimensional_threads_reduce_rows_independently():
    rows, n = 8, 64
    s, A, B = _two_d_threads(rows, n)
    a = np.random.default_rng(4).random((rows, n), dtype=np.float32)
    b = np.zeros(rows, "float32")
    m = templtune.build(s, [A, B], target="cuda")
    assert m.launches[0].block == (16, 4, 1)
    run_module(m, [a, b])
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)


@needs_nvcc
@pytest.mark.parametrize("nthreads", [48, 128])
def test_allreduce_compiles_with_nvcc(nthreads):
    s, A, B = _row_reduce(4, nthreads * 2, nthreads)
    m = templtune.build(s, [A, B], target="cuda")
    assert m.binary


@pytest.mark.parametrize("kind", ["sum", "min"])
def test_reduce_axis_bound_directly_one_allreduce_per_row(kind):
    # The serial outer part of the split becomes a per-thread partial, so the tree runs once,
    # not once per outer iteration.
    s, A, B = _direct_bound(kind)
    m = templtune.build(s, [A, B], target="cuda")
    src = m.get_source()
    assert src.count("red_buf0[(((int)threadIdx.x) + 16)]") == 1
    assert "red_local0" in src
    a = np.random.default_rng(5).standard_normal((3, 100)).astype("float32")
    b = np.zeros(3, "float32")
    run_module(m, [a, b])
    np.testing.assert_allclose(b, a.sum(1) if kind == "sum" else a.min(1), rtol=1e-5, atol=1e-6)


@settings(max_examples=12, deadline=None)
@given(nthreads=st.integers(2, 130), outer=st.integers(1, 3), rows=st.integers(1, 3),
       kind=st.sampled_from(["sum", "max", "min"]))
def test_allreduce_any_extent_matches_numpy(nthreads, outer, rows, kind):
    n = nthreads * outer
    s, A, B = _row_reduce(rows, n, nthreads, kind)
    a = np.random.default_rng(nthreads).standard_normal((rows, n)).astype("float32")
    b = np.zeros(rows, "float32")
    emulate(templtune.lower(s, [A, B]), a, b)
    np.testing.assert_allclose(b, getattr(a, kind)(1), rtol=1e-5, atol=1e-5)


def test_allreduce_under_the_llvm_host_emulator():
    from templtune.runtime.cuda.host_emulate import emulate_llvm

    s, A, B = _row_reduce(5, 144, 48, "max")
    a = np.random.default_rng(7).standard_normal((5, 144)).astype("float32")
    b = np.zeros(5, "float32")
    emulate_llvm(templtune.lower(s, [A, B]), a, b)
    np.testing.assert_allclose(b, a.max(1))


def test_reduction_with_fewer_threads_than_the_kernel_launch():
    # S reduces over 48 threads inside a kernel launched with 64: the `threadIdx.x < 48` guard
    # must not enclose the barriers (they move below it), and Y reads the total from shared.
    rows, n = 3, 192
    A = te.placeholder((rows, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="S")
    Y = te.compute((rows, n), lambda i, j: A[i, j] / S[i], name="Y")
    s = te.create_schedule(Y.op)
    _, ki = s[S].split(S.op.reduce_axis[0], factor=48)
    s[S].allow_reduce_bind = True
    s[S].bind(ki, te.thread_axis("threadIdx.x"))
    _, yi = s[Y].split(Y.op.axis[1], factor=64)
    s[Y].bind(Y.op.axis[0], te.thread_axis("blockIdx.x"))
    s[Y].bind(yi, te.thread_axis("threadIdx.x"))
    s[S].compute_at(s[Y], Y.op.axis[0])
    m = templtune.build(s, [A, Y], target="cuda")
    assert m.launches[0].block == (64, 1, 1)
    a = np.random.default_rng(8).random((rows, n), dtype=np.float32)
    y = np.zeros((rows, n), "float32")
    run_module(m, [a, y])
    np.testing.assert_allclose(y, a / a.sum(1, keepdims=True), rtol=1e-5)


def test_guarded_reduction_under_a_split_tail_guard():
    # A non-dividing split adds a tail guard around the reduction's own `where` condition (the
    # form of an adaptive pool's window); both guards fold into the all-reduce's operand, so
    # no barrier sits under a thread-dependent if.
    rows, n = 3, 49
    A = te.placeholder((rows, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k, where=k % 3 != 1), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=32)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    m = templtune.build(s, [A, B], target="cuda")
    assert "red_buf0" in m.get_source()
    a = np.random.default_rng(9).standard_normal((rows, n)).astype("float32")
    b = np.zeros(rows, "float32")
    run_module(m, [a, b])
    keep = np.arange(n) % 3 != 1
    np.testing.assert_allclose(b, a[:, keep].sum(1), rtol=1e-5, atol=1e-6)
