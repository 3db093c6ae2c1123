"""Itervar / curve features on hand-built loop IR (no lowering needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from templtune.autotvm.feature import (
    ANNOTATIONS,
    curve_feature,
    itervar_feature,
    itervar_feature_names,
    itervar_rows,
    pad_rows,
    summarize,
)
from templtune.autotvm.feature.itervar import ACCESS_WIDTH, ITERVAR_LOOP_WIDTH
from templtune.lower.ir import Buffer, For, ForKind, Load, PrimFunc, Store, seq
from templtune.te.expr import FloatImm, IntImm, Var


def _c(v: int) -> IntImm:
    return IntImm("int32", v)


def gemm(n: int = 64, m: int = 32, k: int = 16, inner: ForKind = ForKind.SERIAL,
         outer: ForKind = ForKind.SERIAL) -> PrimFunc:
    A = Buffer("A", (_c(n), _c(k)), "float32")
    B = Buffer("B", (_c(k), _c(m)), "float32")
    C = Buffer("C", (_c(n), _c(m)), "float32")
    i, j, kk = Var("i"), Var("j"), Var("k")
    cidx = i * m + j
    init = Store(C, cidx, FloatImm("float32", 0.0))
    upd = Store(C, cidx, Load(C, cidx) + Load(A, i * k + kk) * Load(B, kk * m + j))
    body = For(i, _c(0), _c(n), outer,
               For(j, _c(0), _c(m), inner, seq(init, For(kk, _c(0), _c(k), ForKind.SERIAL, upd))))
    return PrimFunc("gemm", (A, B, C), body)


def test_itervar_length_and_determinism():
    s = summarize(gemm())
    assert [lp.var.name for lp in s.loops] == ["i", "j", "k"]
    assert [a.name for a in s.accesses] == ["C_0", "C_1", "A_0", "B_0", "C_2"]
    f1 = itervar_feature(s)
    f2 = itervar_feature(summarize(gemm()))
    assert f1.shape == (3 * (ITERVAR_LOOP_WIDTH + ACCESS_WIDTH * 5),)
    assert f1.dtype == np.float32
    np.testing.assert_array_equal(f1, f2)
    assert len(itervar_feature_names(s)) == len(f1)


def test_itervar_values():
    n, m, k = 64, 32, 16
    s = summarize(gemm(n, m, k))
    rows = itervar_rows(s)
    names = itervar_feature_names(s)
    val = dict(zip(names, rows.reshape(-1)))
    lg = lambda x: math.log2(x + 1)  # noqa: E731
    assert val["i.extent"] == pytest.approx(lg(n))
    assert val["k.nest_level"] == 3
    assert val["k.topdown"] == pytest.approx(lg(n * m * k))
    assert val["i.bottomup"] == pytest.approx(lg(n * m * k))
    assert val["i.ann.serial"] == 1 and sum(val[f"i.ann.{a}"] for a in ANNOTATIONS) == 1
    # one add and one mul per innermost iteration
    assert val["i.add_ct"] == pytest.approx(lg(n * m * k))
    assert val["k.mul_ct"] == pytest.approx(lg(k))
    assert val["i.div_ct"] == 0
    # A[i*k + kk]: stride k for i, absent for j, 1 for kk
    assert val["i.A_0.stride"] == pytest.approx(lg(k))
    assert val["j.A_0.stride"] == 0
    assert val["k.A_0.stride"] == pytest.approx(lg(1))
    assert val["i.A_0.mod"] == pytest.approx(-1.0)
    assert val["i.A_0.count"] == pytest.approx(lg(n * k))
    assert val["i.A_0.reuse"] == pytest.approx(lg(m))
    assert val["j.B_0.count"] == pytest.approx(lg(m * k))
    # the init store of C is not inside k: zeros there
    assert all(val[f"k.C_0.{f}"] == 0 for f in ("stride", "mod", "count", "reuse"))
    assert val["j.C_0.count"] == pytest.approx(lg(m))


def test_annotations_and_thread_counts():
    s = summarize(gemm(inner=ForKind.VECTORIZED, outer=ForKind.PARALLEL))
    val = dict(zip(itervar_feature_names(s), itervar_feature(s)))
    assert val["i.ann.parallel"] == 1 and val["j.ann.vectorized"] == 1
    lg = lambda x: math.log2(x + 1)  # noqa: E731
    # the parallel loop i does not count in the per-thread work
    assert val["i.A_0.count"] == pytest.approx(lg(64 * 16))
    assert val["i.A_0.thread_count"] == pytest.approx(lg(16))


def test_thread_binding_and_vthread_merge():
    A = Buffer("A", (_c(64),), "float32")
    bx, tx, vt = Var("bx"), Var("tx"), Var("vt")
    st = Store(A, bx * 16 + vt * 4 + tx, FloatImm("float32", 1.0))
    inner = For(vt, _c(0), _c(4), ForKind.THREAD_BINDING, st, thread_tag="vthread")
    body = For(bx, _c(0), _c(4), ForKind.THREAD_BINDING,
               For(vt, _c(0), _c(4), ForKind.THREAD_BINDING,
                   For(tx, _c(0), _c(4), ForKind.THREAD_BINDING, inner, thread_tag="threadIdx.x"),
                   thread_tag="vthread"),
               thread_tag="blockIdx.x")
    s = summarize(PrimFunc("f", (A,), body))
    assert [(lp.var.name, lp.annotation) for lp in s.loops] == [
        ("bx", "blockIdx.x"), ("vt", "vthread"), ("tx", "threadIdx.x")]
    assert s.accesses[0].strides == {bx: 16, vt: 4, tx: 1}
    bad = For(tx, _c(0), _c(4), ForKind.THREAD_BINDING, st, thread_tag="warp.x")
    with pytest.raises(ValueError, match="thread tag"):
        summarize(PrimFunc("g", (A,), bad))


def test_nonlinear_index_stride_zero_but_counted():
    A = Buffer("A", (_c(64),), "float32")
    i = Var("i")
    st = Store(A, (i // 4) * 8 + i % 4, FloatImm("float32", 1.0))
    s = summarize(PrimFunc("f", (A,), For(i, _c(0), _c(32), ForKind.SERIAL, st)))
    acc = s.accesses[0]
    assert i in acc.vars and acc.strides[i] == 0


def test_curve_gemm_length():
    s = summarize(gemm())
    f = curve_feature(s, 30)
    assert f.shape == (720,)
    np.testing.assert_array_equal(f, curve_feature(summarize(gemm()), 30))
    assert curve_feature(s, 20).shape == (480,)
    assert np.all(np.isfinite(f))


def test_pad_rows():
    out = pad_rows([np.ones(3), None, np.ones(5)])
    assert out.shape == (3, 5) and out[1].sum() == 0 and out[0, 3:].sum() == 0
    assert pad_rows([np.ones(5)], width=2).shape == (1, 2)
