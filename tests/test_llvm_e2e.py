"""End to end: te compute -> schedule -> lower -> LLVM build -> run, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te, topi
from templtune.codegen.llvm.pool import LAUNCH
from templtune.target import Target

RNG = np.random.default_rng(3)


def _build(s, args, target="llvm", name="f"):
    return templtune.build(s, args, target=target, name=name)


def test_default_schedule_matmul():
    n = 33
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = _build(te.create_schedule(c.op), [a, b, c], name="mm")
    x, y = RNG.random((n, n), dtype="float32"), RNG.random((n, n), dtype="float32")
    z = np.zeros((n, n), "float32")
    mod(x, y, z)
    np.testing.assert_allclose(z, x @ y, rtol=1e-5)
    assert mod.entry_name == "mm"


@pytest.mark.parametrize("threads", [1, 2])
def test_tiled_packed_gemm(threads):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "benchmarks" / "gemm.py"
    spec = importlib.util.spec_from_file_location("bench_gemm", path)
    gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gemm)  # type: ignore[union-attr]
    m, n, k = 64, 64, 48
    s, args = gemm.gemm_schedule(m, n, k, bn=16, bm=32, rb=4, ku=4)
    mod = _build(s, args, target=Target(f"llvm -num-cores={threads}"), name="gemm")
    src = mod.get_source()
    assert "<16 x float>" in src and f"@{LAUNCH}(" in src
    a, b = RNG.random((m, k), dtype="float32"), RNG.random((k, n), dtype="float32")
    c = np.zeros((m, n), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_split_tail_and_fuse():
    n = 37  # not a multiple of the split factor: guarded tail
    a = te.placeholder((n, 5), name="A")
    c = te.compute((n, 5), lambda i, j: a[i, j] * 2.0 + 1.0, name="C")
    s = te.create_schedule(c.op)
    f = s[c].fuse(*s[c].op.axis)
    fo, fi = s[c].split(f, factor=8)
    s[c].parallel(fo)
    mod = _build(s, [a, c])
    x, y = RNG.random((n, 5), dtype="float32"), np.zeros((n, 5), "float32")
    mod(x, y)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


def test_conv2d_padding_vectorized_parallel():
    n, ci, hw, co, kk = 1, 8, 9, 16, 3
    data = te.placeholder((n, ci, hw, hw), name="data")
    kernel = te.placeholder((co, ci, kk, kk), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)
    s = te.create_schedule(conv.op)
    s[conv.op.input_tensors[0]].compute_inline()
    _, ff, yy, xx = s[conv].op.axis
    s[conv].parallel(ff)
    xo, xi = s[conv].split(xx, factor=3)
    s[conv].unroll(xi)
    mod = _build(s, [data, kernel, conv], name="conv")
    a = RNG.random((n, ci, hw, hw), dtype="float32")
    w = RNG.random((co, ci, kk, kk), dtype="float32")
    out = np.zeros((n, co, hw, hw), "float32")
    mod(a, w, out)
    ref = topi.testing.conv2d_nchw_python(a, w, 1, 1)
    np.testing.assert_allclose(out, ref, rtol=1e-4)


def test_blocked_conv2d_benchmark_schedule_small():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "benchmarks" / "build_time.py"
    spec = importlib.util.spec_from_file_location("bench_build_time", path)
    bt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bt)  # type: ignore[union-attr]
    s, args = bt.conv2d_schedule(n=1, c=8, hw=5, f=32, k=3, pad=1, vf=16, rcf=4)
    mod = _build(s, args, name="conv2d")
    a = RNG.random((1, 8, 5, 5), dtype="float32")
    w = RNG.random((32, 8, 3, 3), dtype="float32")
    out = np.zeros((1, 32, 5, 5), "float32")
    mod(a, w, out)
    np.testing.assert_allclose(out, topi.testing.conv2d_nchw_python(a, w, 1, 1), rtol=1e-4)


@pytest.mark.parametrize("dtype", ["int32", "int8", "float16"])
def test_elementwise_dtypes_vectorized(dtype):
    n = 64
    a = te.placeholder((n,), name="A", dtype=dtype)
    b = te.placeholder((n,), name="B", dtype=dtype)
    c = te.compute((n,), lambda i: a[i] + b[i] * b[i], name="C")
    s = te.create_schedule(c.op)
    o, i = s[c].split(c.op.axis[0], factor=16)
    s[c].vectorize(i)
    mod = _build(s, [a, b, c])
    x = RNG.integers(-5, 5, n).astype(dtype)
    y = RNG.integers(-5, 5, n).astype(dtype)
    z = np.zeros(n, dtype)
    mod(x, y, z)
    np.testing.assert_allclose(z, x + y * y)


def test_reduction_max_and_intrinsics():
    n, m = 8, 20
    a = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    mx = te.compute((n,), lambda i: te.max(a[i, k], axis=k), name="mx")
    e = te.compute((n, m), lambda i, j: te.exp(a[i, j] - mx[i]), name="e")
    s = te.create_schedule(e.op)
    mod = _build(s, [a, e])
    x = RNG.standard_normal((n, m)).astype("float32")
    y = np.zeros((n, m), "float32")
    mod(x, y)
    np.testing.assert_allclose(y, np.exp(x - x.max(axis=1, keepdims=True)), rtol=1e-5)


def test_build_uses_enclosing_target_and_cache_hits():
    n = 16
    a = te.placeholder((n,), name="A")
    c = te.compute((n,), lambda i: a[i] + 1.0, name="C")
    s = te.create_schedule(c.op)
    with Target("llvm -num-cores=1"):
        m1 = templtune.build(s, [a, c])
    assert m1.num_threads == 1 and m1.entry_name == "default_function"
    x, y = RNG.random(n, dtype="float32"), np.zeros(n, "float32")
    m1(x, y)
    np.testing.assert_allclose(y, x + 1)
