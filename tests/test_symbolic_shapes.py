"""Symbolic shapes end to end: ``te.var`` extents through bound inference, guards, lowering with
shape arguments, LLVM and CUDA codegen, and calls that bind and check the shapes.

The first tests hold the vector-add cells of TVM's tutorial "Working with Operators Using Tensor
Expression" with only the imports changed; numpy is the oracle everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune as tvm
import templtune.testing
from templtune import te
from templtune.errors import ExprError, LoweringError, RuntimeCallError

SIZES = (1024, 1, 63, 1000, 0)


def _vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    return A, B, C


def _check_sizes(f, dev, sizes=SIZES):
    rng = np.random.default_rng(0)
    for n in sizes:
        a = tvm.nd.array(rng.uniform(size=n).astype("float32"), dev)
        b = tvm.nd.array(rng.uniform(size=n).astype("float32"), dev)
        c = tvm.nd.array(np.zeros(n, dtype="float32"), dev)
        f(a, b, c)
        tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())


def test_tutorial_vector_add_cells_cpu():
    # --- the tutorial's cells (imports changed) ---
    tgt = tvm.target.Target(target="llvm", host="llvm")
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    fadd = tvm.build(s, [A, B, C], tgt, name="myadd")
    dev = tvm.device(tgt.kind.name, 0)
    n = 1024
    a = tvm.nd.array(np.random.uniform(size=n).astype(A.dtype), dev)
    b = tvm.nd.array(np.random.uniform(size=n).astype(B.dtype), dev)
    c = tvm.nd.array(np.zeros(n, dtype=C.dtype), dev)
    fadd(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())

    def evaluate_addition(func, target, optimization, log):
        dev = tvm.device(target.kind.name, 0)
        n = 32768
        a = tvm.nd.array(np.random.uniform(size=n).astype(A.dtype), dev)
        b = tvm.nd.array(np.random.uniform(size=n).astype(B.dtype), dev)
        c = tvm.nd.array(np.zeros(n, dtype=C.dtype), dev)
        evaluator = func.time_evaluator(func.entry_name, dev, number=10)
        mean_time = evaluator(a, b, c).mean
        log.append((optimization, mean_time))
        tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())

    log = []
    evaluate_addition(fadd, tgt, "naive", log=log)
    s[C].parallel(C.op.axis[0])
    lowered_parallel = str(tvm.lower(s, [A, B, C], simple_mode=True))
    fadd_parallel = tvm.build(s, [A, B, C], tgt, name="myadd_parallel")
    fadd_parallel(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    evaluate_addition(fadd_parallel, tgt, "parallel", log=log)

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    factor = 4
    outer, inner = s[C].split(C.op.axis[0], factor=factor)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    fadd_vector = tvm.build(s, [A, B, C], tgt, name="myadd_parallel")
    evaluate_addition(fadd_vector, tgt, "vector", log=log)
    lowered_vector = str(tvm.lower(s, [A, B, C], simple_mode=True))
    # --- end of the tutorial's cells ---
    assert [name for name, t in log] == ["naive", "parallel", "vector"]
    assert all(t > 0 for _, t in log)
    assert 'for (i: int32, 0, n) "parallel"' in lowered_parallel
    assert "[n]" in lowered_vector
    assert 'for (i.outer: int32, 0, floordiv((n + 3), 4)) "parallel"' in lowered_vector
    assert "@tir.likely((((i.outer * 4) + i.inner) < n), dtype=bool)" in lowered_vector
    # the built functions take arrays of any size
    for f in (fadd, fadd_parallel, fadd_vector):
        _check_sizes(f, dev)


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


def _matmul():
    n, m, ln = te.var("n"), te.var("m"), te.var("l")
    A = te.placeholder((n, ln), name="A")
    B = te.placeholder((ln, m), name="B")
    k = te.reduce_axis((0, ln), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _run_matmul(f, shapes):
    rng = np.random.default_rng(1)
    for n, m, ln in shapes:
        a = rng.standard_normal((n, ln)).astype("float32")
        b = rng.standard_normal((ln, m)).astype("float32")
        c = np.full((n, m), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


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


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["lockstep", "llvm"])
def test_tutorial_vector_add_cuda_on_emulator(monkeypatch, mode):
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    if mode == "llvm":
        monkeypatch.setenv("TEMPLTUNE_CUDA_EMULATOR", "llvm")
    # --- the tutorial's GPU cells (imports changed) ---
    tgt_gpu = tvm.target.Target(target="cuda", host="llvm")
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    fadd = tvm.build(s, [A, B, C], target=tgt_gpu, name="myadd")
    dev = tvm.device(tgt_gpu.kind.name, 0)
    n = 1024
    a = tvm.nd.array(np.random.uniform(size=n).astype(A.dtype), dev)
    b = tvm.nd.array(np.random.uniform(size=n).astype(B.dtype), dev)
    c = tvm.nd.array(np.zeros(n, dtype=C.dtype), dev)
    fadd(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    if tgt_gpu.kind.name == "cuda":
        dev_module = fadd.imported_modules[0]
        source = dev_module.get_source()
    # --- end of the tutorial's cells ---
    assert fadd.binary is not None  # nvcc compiled it
    assert ("myadd_kernel0(float* __restrict__ A, float* __restrict__ B, "
            "float* __restrict__ C, int n)") in source
    assert "< n)" in source
    _check_sizes(fadd, dev, (1, 63, 64, 65, 1000, 0))
    with pytest.raises(RuntimeCallError, match="arguments A and B of myadd disagree on n"):
        fadd(np.zeros(3, "float32"), np.zeros(4, "float32"), np.zeros(3, "float32"))


@pytest.mark.cuda
def test_cuda_symbolic_matmul_2d_grid(monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    by, ty = s[C].split(i, factor=4)
    bx, tx = s[C].split(j, factor=8)
    s[C].reorder(by, bx, ty, tx)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B, C], "cuda")
    assert f.binary is not None
    assert "int n, int l, int m)" in f.get_source()
    _run_matmul(f, ((5, 7, 3), (9, 17, 4), (1, 1, 1)))


def test_cuda_symbolic_thread_extent_is_refused():
    A, B, C = _vector_add()
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], nparts=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    from templtune.errors import CodegenError

    with pytest.raises(CodegenError, match="constant extent of the loop bound to threadIdx.x"):
        tvm.build(s, [A, B, C], "cuda")


@pytest.mark.cuda
def test_cuda_symbolic_matmul_shared_memory(monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    by, ty = s[C].split(C.op.axis[0], factor=8)
    bx, tx = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(by, bx, ty, tx)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        s[C].bind(ax, te.thread_axis(tag))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=4)
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        fo, fi = s[S].split(s[S].fuse(*s[S].op.axis), factor=64)
        fy, fx = s[S].split(fi, factor=8)
        s[S].bind(fy, te.thread_axis("threadIdx.y"))
        s[S].bind(fx, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B, C], "cuda")
    src = f.get_source()
    assert f.binary is not None
    # constant tiles in shared memory; the symbolic reduction loop and guards use n, l, m
    assert "__shared__ float A_shared[32];" in src and "k_outer < ((l + 3) / 4)" in src
    _run_matmul(f, ((5, 7, 3), (16, 16, 8), (9, 17, 13)))


def test_shape_beyond_int32_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype="int8")
    C = te.compute((n,), lambda i: A[i], name="C")
    f = tvm.build(te.create_schedule(C.op), [A, C], "llvm")
    big = np.empty(2**31, "int8")  # untouched pages: no physical memory is used
    with pytest.raises(RuntimeCallError, match="n = 2147483648 does not fit its dtype int32"):
        f(big, big)
