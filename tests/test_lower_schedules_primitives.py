"""Hand schedules using every schedule primitive on a matmul or an elementwise chain (split,
tile, fuse, reorder, vectorize, unroll, parallel, cache_read/cache_write, compute_at/root/inline,
rfactor, pragma, storage_align), lowered and run by the loop-IR interpreter vs numpy."""

from __future__ import annotations

import numpy as np
import pytest
from lower_schedules_helpers import _rand, check_matmul, execute, kinds, matmul

import templtune
from templtune import te
from templtune.lower.ir import ForKind, Ramp
from templtune.te.functor import post_order


def test_placeholder_missing_from_args_is_an_error():
    from templtune.errors import LoweringError

    with pytest.raises(LoweringError, match="tensor A is read"):
        check_matmul(te.create_schedule(matmul()[2].op), *matmul())


def test_default_schedule():
    A, B, C = matmul()
    check_matmul(te.create_schedule(C.op), A, B, C)


@pytest.mark.parametrize("factor", [1, 3, 4, 12, 20])
def test_split_factor_incl_non_divisible(factor):
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[0], factor=factor)
    s[C].split(s[C].op.reduce_axis[0], factor=factor)
    check_matmul(s, A, B, C)


@pytest.mark.parametrize("nparts", [1, 5, 7, 30])
def test_split_nparts(nparts):
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[1], nparts=nparts)
    check_matmul(s, A, B, C)


def test_tile_reorder_vectorize_unroll_parallel():
    A, B, C = matmul(16, 16, 8)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    ko, ki = s[C].split(k, 2)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)
    f = check_matmul(s, A, B, C)
    ks = kinds(f)
    assert ForKind.PARALLEL in ks and ForKind.VECTORIZED not in ks
    assert any(isinstance(n, Ramp) for n in post_order(f.body))
    assert "k.inner" not in str(f)  # explicitly unrolled


def test_vectorize_with_guard_falls_back_to_scalar():
    A, B, C = matmul(8, 10, 4)
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(s[C].op.axis[1], 4)
    s[C].vectorize(ji)
    f = check_matmul(s, A, B, C)
    assert ForKind.VECTORIZED not in kinds(f)
    assert not any(isinstance(n, Ramp) for n in post_order(f.body))


def test_fuse_and_split_fused():
    A, B, C = matmul(6, 10, 5)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    fused = s[C].fuse(i, j)
    fo, fi = s[C].split(fused, 7)
    s[C].parallel(fo)
    check_matmul(s, A, B, C)


def test_fuse_reduce_axes():
    A = te.placeholder((4, 6, 5), name="A")
    r1 = te.reduce_axis((0, 6), name="r1")
    r2 = te.reduce_axis((0, 5), name="r2")
    B = te.compute((4,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2]), name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(r1, r2)
    s[B].split(f, 4)
    func = templtune.lower(s, [A, B])
    a, b = _rand(4, 6, 5), np.zeros(4, "float32")
    execute(func, a, b)
    np.testing.assert_allclose(b, a.sum(axis=(1, 2)), rtol=1e-5)


def test_cache_write_compute_at_vectorize():
    A, B, C = matmul(16, 12, 10)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], 4)
    s[CC].reorder(ko, ci, ki, cj)
    s[CC].vectorize(cj)
    s[C].vectorize(ji)
    f = check_matmul(s, A, B, C)
    text = str(f)
    assert "allocate(C.local: Pointer(local float32), float32, [16]), storage_scope = local;" in text


def test_cache_read_shared_compute_at():
    A, B, C = matmul(16, 16, 16)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BL = s.cache_read(B, "local", [C])
    io, ii = s[C].split(s[C].op.axis[0], 4)
    s[AA].compute_at(s[C], io)
    s[BL].compute_at(s[C], ii)
    f = check_matmul(s, A, B, C)
    assert "A.shared: Pointer(shared float32), float32, [64]" in str(f)


def test_compute_root_undoes_compute_at():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "global", [C])
    s[AA].compute_at(s[C], s[C].op.axis[0])
    s[AA].compute_root()
    assert s[AA].attach_type == "root"
    check_matmul(s, A, B, C)


def test_rfactor_both_axes():
    for which in (0, 1):
        A, B, C = matmul(6, 5, 16)
        s = te.create_schedule(C.op)
        ko, ki = s[C].split(s[C].op.reduce_axis[0], 4)
        CF = s.rfactor(C, (ko, ki)[which])
        assert CF.op.name == "C.rf"
        assert len(CF.shape) == 3
        check_matmul(s, A, B, C)


def test_rfactor_non_divisible_and_factor_axis():
    A, B, C = matmul(4, 3, 10)
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], 4)
    CF = s.rfactor(C, ki, factor_axis=2)
    assert [int(d) for d in CF.shape] == [4, 3, 4]
    s[CF].compute_at(s[C], s[C].op.axis[0])
    check_matmul(s, A, B, C)


def test_pragma_auto_unroll_and_explicit():
    A, B, C = matmul(8, 8, 4)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(s[C].op.axis[0], 2)
    s[C].pragma(io, "auto_unroll_max_step", 64)
    s[C].pragma(io, "unroll_explicit", False)
    f = check_matmul(s, A, B, C)
    assert ForKind.UNROLLED in kinds(f)
    s[C].pragma(io, "unroll_explicit", True)
    f = check_matmul(s, A, B, C)
    assert ForKind.UNROLLED not in kinds(f)


def test_storage_align_pads_stride():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[j, i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(s[B].op.axis[0], 16, 1)
    f = templtune.lower(s, [A, C])
    assert "allocate(B: Pointer(global float32), float32, [136])" in str(f)
    a, c = _rand(8, 8), np.zeros((8, 8), "float32")
    execute(f, a, c)
    np.testing.assert_allclose(c, a.T * 2 + 1, rtol=1e-6)


def test_elementwise_chain_inline_and_compute_at():
    A = te.placeholder((10, 12), name="A")
    B = te.compute((10, 12), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((10, 12), lambda i, j: te.exp(B[i, j]) * 2.0, name="C")
    D = te.compute((10, 12), lambda i, j: C[i, j] - B[i, j], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    xo, xi = s[D].split(s[D].op.axis[1], 5)
    s[C].compute_at(s[D], xo)
    f = templtune.lower(s, [A, D])
    a, d = _rand(10, 12), np.zeros((10, 12), "float32")
    execute(f, a, d)
    np.testing.assert_allclose(d, np.exp(a + 1) * 2 - (a + 1), rtol=1e-5)
    assert "allocate(C: Pointer(global float32), float32, [5])" in str(f)


def test_shifted_reads_compute_at_region():
    A = te.placeholder((20,), name="A")
    B = te.compute((20,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((18,), lambda i: B[i] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(s[C].op.axis[0], 4)
    s[B].compute_at(s[C], xo)
    f = templtune.lower(s, [A, C])
    assert "float32, [6])" in str(f)
    a, c = _rand(20), np.zeros(18, "float32")
    execute(f, a, c)
    np.testing.assert_allclose(c, 3 * a[:18] + 3 * a[2:], rtol=1e-6)
