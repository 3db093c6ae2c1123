"""LLVM backend: vector IR from Ramp/Broadcast, gathers/scatters, parallel loops on templtune's
thread pool and on libgomp."""

from __future__ import annotations

import numpy as np
import pytest

from templtune import config
from templtune.build_module import build
from templtune.codegen.llvm import compile as cc
from templtune.codegen.llvm.pool import LAUNCH
from templtune.codegen.llvm.render import ParallelRuntime, render
from templtune.codegen.llvm.testing import elementwise, matmul
from templtune.lower.ir import Broadcast, Buffer, For, ForKind, Load, PrimFunc, Ramp, Store
from templtune.target import Target
from templtune.te.expr import BinOp, BinOpKind, Call, Select, Var, binary, const

RNG = np.random.default_rng(1)


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_vector_add_emits_vector_ir(lanes):
    f = elementwise(lambda a, b: a * b + a, ["float32", "float32"], "float32", 256, lanes=lanes)
    mod = build(f)
    src = mod.get_source("ll")
    assert f"load <{lanes} x float>" in src and f"store <{lanes} x float>" in src
    assert "fmul contract" in src and "fadd contract" in src
    a, b = RNG.random(256, dtype="float32"), RNG.random(256, dtype="float32")
    out = np.zeros(256, "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, a * b + a, rtol=1e-6)


def test_fma_contraction_in_asm():
    f = elementwise(lambda a, b: a * b + a, ["float32", "float32"], "float32", 256, lanes=16)
    asm = build(f).get_source("asm").lower()
    if "fma" not in cc.host_spec().features:
        pytest.skip("host has no FMA")
    assert "vfmadd" in asm


def test_strided_gather_scatter_and_broadcast():
    n, lanes = 64, 8
    a = Buffer("A", (const(2 * n),), "float32")
    c = Buffer("C", (const(2 * n),), "float32")
    s = Buffer("S", (const(1),), "float32")
    i = Var("i")
    src = Ramp(i * (2 * lanes), const(2), lanes)  # even elements
    dst = Ramp(i * (2 * lanes) + 1, const(2), lanes)  # odd elements
    val = Load(a, src) + Broadcast(Load(s, const(0)), lanes)
    f = PrimFunc("gs", (a, s, c), For(i, const(0), const(n // lanes), ForKind.SERIAL,
                                      Store(c, dst, val)))
    mod = build(f)
    ir = mod.get_source()
    assert "llvm.masked.gather" in ir and "llvm.masked.scatter" in ir
    x, sv, out = RNG.random(2 * n, dtype="float32"), np.array([5.0], "float32"), np.zeros(2 * n,
                                                                                            "float32")
    mod(x, sv, out)
    np.testing.assert_allclose(out[1::2], x[::2] + 5)
    np.testing.assert_array_equal(out[::2], 0)


def test_predicated_vector_load_store():
    n, lanes = 20, 8  # the last vector is partial
    a = Buffer("A", (const(n),), "float32")
    c = Buffer("C", (const(n),), "float32")
    i = Var("i")
    idx = Ramp(i * lanes, const(1), lanes)
    pred = binary(BinOpKind.LT, idx, Broadcast(const(n), lanes))
    body = Store(c, idx, Load(a, idx, pred) * 2.0, pred)
    mod = build(PrimFunc("pred", (a, c), For(i, const(0), const(3), ForKind.SERIAL, body)))
    x, out = RNG.random(n, dtype="float32"), np.zeros(n, "float32")
    mod(x, out)
    np.testing.assert_allclose(out, x * 2)


def test_vector_select_compare_intrinsic_int():
    lanes = 8
    f = elementwise(lambda a, b: Select(a > b, Call("float32x8", "exp", (a,)), b),
                    ["float32", "float32"], "float32", 64, lanes=lanes)
    mod = build(f)
    a, b = RNG.uniform(-2, 2, 64).astype("float32"), RNG.uniform(-2, 2, 64).astype("float32")
    out = np.zeros(64, "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, np.where(a > b, np.exp(a), b), rtol=1e-6)
    g = elementwise(lambda a, b: BinOp(BinOpKind.FLOORMOD, a, b, a.dtype), ["int32", "int32"],
                    "int32", 64, lanes=lanes)
    ai = RNG.integers(-100, 100, 64).astype("int32")
    bi = RNG.integers(1, 9, 64).astype("int32")
    oi = np.zeros(64, "int32")
    build(g)(ai, bi, oi)
    np.testing.assert_array_equal(oi, np.mod(ai, bi))


def test_vectorized_for_gets_metadata():
    f = elementwise(lambda a: a + 1.0, ["float32"], "float32", 64, kind=ForKind.VECTORIZED)
    r = render(f)
    assert "llvm.loop.vectorize.enable" in r.ir
    mod = build(f)
    x, out = RNG.random(64, dtype="float32"), np.zeros(64, "float32")
    mod(x, out)
    np.testing.assert_allclose(out, x + 1)


def test_unrolled_loop_metadata():
    r = render(matmul(4, 16, 8, lanes=16, unroll_k=4, parallel=False))
    assert "llvm.loop.unroll.full" in r.ir


#: what each runtime's parallel loop calls
_LAUNCHES = {"templtune": f"call void @{LAUNCH}(", "gomp": "call void @GOMP_parallel("}


@pytest.mark.parametrize("pool", sorted(_LAUNCHES))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lanes", [4, 16])
def test_parallel_matmul(threads, lanes, pool):
    n, m, k = 37, 32, 24
    f = matmul(n, m, k, lanes=lanes, unroll_k=4, parallel=True)
    with config.scope(thread_pool=pool):
        mod = build(f, target=Target(f"llvm -num-cores={threads}"))
    assert mod.num_threads == threads
    assert _LAUNCHES[pool] in mod.get_source()
    a, b = RNG.random((n, k), dtype="float32"), RNG.random((k, m), dtype="float32")
    c = np.zeros((n, m), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


@pytest.mark.parametrize("pool", sorted(_LAUNCHES))
def test_parallel_thread_count_settable_and_uneven_chunks(pool):
    f = elementwise(lambda a: a * 2.0, ["float32"], "float32", 7, kind=ForKind.PARALLEL)
    with config.scope(thread_pool=pool):
        mod = build(f)
    x = RNG.random(7, dtype="float32")
    for t in (1, 2, 3, 8):
        mod.set_num_threads(t)
        out = np.zeros(7, "float32")
        mod(x, out)
        np.testing.assert_allclose(out, x * 2)


def test_nested_parallel_runs_inner_serially():
    n = 8
    a = Buffer("A", (const(n * n),), "int32")
    i, j = Var("i"), Var("j")
    body = For(i, const(0), const(n), ForKind.PARALLEL,
               For(j, const(0), const(n), ForKind.PARALLEL, Store(a, i * n + j, i * 10 + j)))
    mod = build(PrimFunc("nest", (a,), body))
    assert mod.get_source().count(_LAUNCHES["templtune"]) == 1
    out = np.zeros(n * n, "int32")
    mod(out)
    np.testing.assert_array_equal(out.reshape(n, n), np.add.outer(np.arange(n) * 10,
                                                                  np.arange(n)))


def test_serial_fallback_without_a_thread_library():
    f = elementwise(lambda a: a + 1.0, ["float32"], "float32", 16, kind=ForKind.PARALLEL)
    r = render(f, runtime=ParallelRuntime.SERIAL)
    assert not any(c in r.ir for c in _LAUNCHES.values()) and not r.parallel


def test_guarded_vector_select_masks_untaken_lanes():
    """Lane-wise if_then_else: lanes that do not take a branch must not load (here they would
    read 400 MB past the buffer)."""
    n, lanes = 64, 8
    a = Buffer("A", (const(n),), "float32")
    c = Buffer("C", (const(n),), "float32")
    i = Var("i")
    idx = Ramp(i * lanes, const(1), lanes)
    cond = binary(BinOpKind.LT, idx, Broadcast(const(20), lanes))
    far = binary(BinOpKind.ADD, idx, Select(binary(BinOpKind.GE, idx, Broadcast(const(20), lanes)),
                                            Broadcast(const(100_000_000), lanes),
                                            Broadcast(const(0), lanes)))
    val = Select(cond, Load(a, far) * 2.0, Broadcast(const(-1.0), lanes), guarded=True)
    mod = build(PrimFunc("vguard", (a, c), For(i, const(0), const(n // lanes), ForKind.SERIAL,
                                               Store(c, idx, val))))
    assert "llvm.masked.gather" in mod.get_source()
    x, out = RNG.random(n, dtype="float32"), np.zeros(n, "float32")
    mod(x, out)
    np.testing.assert_allclose(out, np.where(np.arange(n) < 20, x * 2, -1))


def test_vector_bool_and_scalar_predicated_load():
    f = elementwise(lambda a, b: binary(BinOpKind.LT, a, b), ["float32", "float32"], "bool", 64,
                    lanes=8)
    mod = build(f)
    a, b = RNG.random(64, dtype="float32"), RNG.random(64, dtype="float32")
    out = np.zeros(64, bool)
    mod(a, b, out)
    np.testing.assert_array_equal(out, a < b)
    n = Var("n")
    x = Buffer("X", (n,), "float32")
    y = Buffer("Y", (n,), "float32")
    i = Var("i")
    far = Load(x, i * 100_000_000, binary(BinOpKind.LT, i, 1))  # predicated: read only if i < 1
    body = For(i, const(0), n, ForKind.SERIAL, Store(y, i, far + 1.0))
    m2 = build(PrimFunc("pl", (x, y), body))
    xv, yv = np.full(8, 5.0, "float32"), np.zeros(8, "float32")
    m2(xv, yv)
    np.testing.assert_allclose(yv, [6, 1, 1, 1, 1, 1, 1, 1])


def test_thread_count_environment(monkeypatch) -> None:
    from templtune.codegen.llvm.compile import default_num_threads

    monkeypatch.delenv("TEMPLTUNE_NUM_THREADS", raising=False)
    monkeypatch.setenv("TVM_NUM_THREADS", "3")
    assert default_num_threads() == 3  # TVM's variable carries over
    monkeypatch.setenv("TEMPLTUNE_NUM_THREADS", "1")
    assert default_num_threads() == 1  # ours wins
    monkeypatch.setenv("TEMPLTUNE_NUM_THREADS", "x")
    assert default_num_threads() == 3  # a bad value is ignored (warned), not fatal
