"""LLVM backend: every op kind and dtype on hand-built loop IR, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from templtune.build_module import build
from templtune.codegen.llvm import compile as cc
from templtune.codegen.llvm.render import render
from templtune.codegen.llvm.testing import elementwise
from templtune.errors import CodegenError
from templtune.lower.ir import (
    Allocate,
    Buffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Store,
    seq,
)
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    Not,
    Select,
    Var,
    binary,
    const,
)

N = 64
RNG = np.random.default_rng(0)


def _rand(dtype: str, n: int = N, lo: float = -8, hi: float = 8) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(n) < 0.5
    if dtype.startswith("float"):
        return RNG.uniform(lo, hi, n).astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, int(lo)), min(info.max, int(hi)) + 1, n).astype(dtype)


def _run(fn, in_dtypes, out_dtype, inputs=None, lanes=1):
    f = elementwise(fn, in_dtypes, out_dtype, N, lanes=lanes)
    mod = build(f, target="llvm")
    ins = inputs if inputs is not None else [_rand(d) for d in in_dtypes]
    out = np.zeros(N, out_dtype)
    mod(*ins, out)
    return ins, out, mod


def _op(kind):
    return lambda a, b: binary(kind, a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8", "int64", "uint8"])
@pytest.mark.parametrize("kind,ref", [
    (BinOpKind.ADD, np.add), (BinOpKind.SUB, np.subtract), (BinOpKind.MUL, np.multiply),
    (BinOpKind.MIN, np.minimum), (BinOpKind.MAX, np.maximum),
])
def test_arith(dtype, kind, ref):
    lo = 0 if dtype.startswith("u") else -8
    ins = [_rand(dtype, lo=lo), _rand(dtype, lo=lo)]
    _, out, _ = _run(_op(kind), [dtype, dtype], dtype, ins)
    np.testing.assert_allclose(out, ref(*ins).astype(dtype), rtol=1e-6)


@pytest.mark.parametrize("kind,ref", [
    (BinOpKind.EQ, np.equal), (BinOpKind.NE, np.not_equal), (BinOpKind.LT, np.less),
    (BinOpKind.LE, np.less_equal), (BinOpKind.GT, np.greater), (BinOpKind.GE, np.greater_equal),
])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_compare_to_bool(kind, ref, dtype):
    a = _rand(dtype, lo=-3, hi=3)
    b = _rand(dtype, lo=-3, hi=3)
    if dtype == "float32":
        a, b = np.round(a), np.round(b)  # make equality happen
    _, out, _ = _run(_op(kind), [dtype, dtype], "bool", [a, b])
    np.testing.assert_array_equal(out, ref(a, b))


def test_true_division():
    a, b = _rand("float32"), _rand("float32", lo=1, hi=4)
    _, out, _ = _run(_op(BinOpKind.DIV), ["float32", "float32"], "float32", [a, b])
    np.testing.assert_allclose(out, a / b, rtol=1e-6)
    ai, bi = _rand("int32", lo=-50, hi=50), _rand("int32", lo=1, hi=7) * RNG.choice([-1, 1], N)
    _, out, _ = _run(_op(BinOpKind.DIV), ["int32", "int32"], "int32", [ai, bi.astype("int32")])
    np.testing.assert_array_equal(out, np.trunc(ai / bi).astype("int32"))  # C semantics


@pytest.mark.parametrize("divisor", [4, 7, -3, -8, 1])
def test_floordiv_floormod_constant(divisor):
    a = np.arange(-N // 2, N // 2, dtype="int32") * 3
    _, q, _ = _run(lambda x: x // divisor, ["int32"], "int32", [a])
    _, r, _ = _run(lambda x: x % divisor, ["int32"], "int32", [a])
    np.testing.assert_array_equal(q, np.floor_divide(a, divisor))
    np.testing.assert_array_equal(r, np.mod(a, divisor))


@pytest.fixture(scope="module")
def divmod_mods():
    fd = build(elementwise(_op(BinOpKind.FLOORDIV), ["int32", "int32"], "int32", 16))
    fm = build(elementwise(_op(BinOpKind.FLOORMOD), ["int32", "int32"], "int32", 16))
    return fd, fm


@settings(max_examples=60, deadline=None)
@given(a=hnp.arrays(np.int32, 16, elements=st.integers(-10**6, 10**6)),
       b=hnp.arrays(np.int32, 16, elements=st.integers(-1000, 1000).filter(lambda v: v != 0)))
def test_floordiv_floormod_property(divmod_mods, a, b):
    fd, fm = divmod_mods
    q, r = np.zeros(16, "int32"), np.zeros(16, "int32")
    fd(a, b, q)
    fm(a, b, r)
    np.testing.assert_array_equal(q, np.floor_divide(a, b))
    np.testing.assert_array_equal(r, np.mod(a, b))
    np.testing.assert_array_equal(q * b + r, a)


def test_float_floordiv_floormod():
    a, b = _rand("float32"), _rand("float32", lo=0.5, hi=3)
    _, q, _ = _run(_op(BinOpKind.FLOORDIV), ["float32", "float32"], "float32", [a, b])
    _, r, _ = _run(_op(BinOpKind.FLOORMOD), ["float32", "float32"], "float32", [a, b])
    np.testing.assert_allclose(q, np.floor(a / b), rtol=1e-6)
    np.testing.assert_allclose(r, a - np.floor(a / b) * b, rtol=1e-5, atol=1e-5)


def test_bool_logic():
    a, b = _rand("bool"), _rand("bool")
    _, o1, _ = _run(lambda x, y: (x & y) | Not(x), ["bool", "bool"], "bool", [a, b])
    np.testing.assert_array_equal(o1, (a & b) | ~a)


@pytest.mark.parametrize("frm,to", [
    ("float32", "int32"), ("int32", "float32"), ("float32", "float16"), ("float16", "float32"),
    ("bool", "float32"), ("float32", "bool"), ("int32", "int8"), ("int8", "int32"),
    ("uint8", "float32"), ("float64", "float32"), ("int32", "int64"),
])
def test_cast(frm, to):
    a = _rand(frm, lo=0 if frm.startswith("u") else -100, hi=100)
    _, out, _ = _run(lambda x: Cast(to, x), [frm], to, [a])
    np.testing.assert_array_equal(out, a.astype(to))


def test_float16_storage_arith():
    a, b = _rand("float16"), _rand("float16")
    _, out, _ = _run(_op(BinOpKind.MUL), ["float16", "float16"], "float16", [a, b])
    np.testing.assert_allclose(out, a * b, rtol=1e-3)


@pytest.mark.parametrize("name,ref,lo", [
    ("exp", np.exp, -4), ("log", np.log, 0.1), ("sqrt", np.sqrt, 0.0), ("tanh", np.tanh, -4),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), -6), ("fabs", np.abs, -4),
    ("floor", np.floor, -4), ("ceil", np.ceil, -4),
])
@pytest.mark.parametrize("lanes", [1, 8])
def test_intrinsics(name, ref, lo, lanes):
    a = _rand("float32", lo=lo, hi=4)
    _, out, _ = _run(lambda x: Call("float32", name, (x,)), ["float32"], "float32", [a], lanes)
    np.testing.assert_allclose(out, ref(a).astype("float32"), rtol=2e-6, atol=1e-6)


def test_pow_and_int_abs():
    a, b = _rand("float32", lo=0.5, hi=3), _rand("float32", lo=-2, hi=2)
    _, out, _ = _run(lambda x, y: Call("float32", "pow", (x, y)), ["float32"] * 2, "float32",
                     [a, b])
    np.testing.assert_allclose(out, a ** b, rtol=1e-5)
    ai = _rand("int32")
    _, out, _ = _run(lambda x: Call("int32", "abs", (x,)), ["int32"], "int32", [ai])
    np.testing.assert_array_equal(out, np.abs(ai))


def test_unguarded_select():
    a, b = _rand("float32"), _rand("float32")
    _, out, _ = _run(lambda x, y: Select(x < y, x * 2.0, y), ["float32"] * 2, "float32", [a, b])
    np.testing.assert_allclose(out, np.where(a < b, a * 2, b))


def test_guarded_select_skips_untaken_branch():
    """``if_then_else`` over a far out-of-bounds load: evaluating it would crash."""
    a = Buffer("A", (const(N),), "float32")
    c = Buffer("C", (const(N),), "float32")
    i = Var("i")
    far = Load(a, i * 100_000_000 + 1_000_000_000)
    val = Select(i < 10, Load(a, i) + 1.0, far, guarded=True)
    body = For(i, const(0), const(N), ForKind.SERIAL,
               Store(c, i, Select(i >= 10, const(0.0), val, guarded=True)))
    mod = build(PrimFunc("guard", (a, c), body))
    x, out = _rand("float32"), np.ones(N, "float32")
    mod(x, out)
    np.testing.assert_allclose(out, np.where(np.arange(N) < 10, x + 1, 0))
    assert "phi float" not in mod.get_source()  # clamped loads: branch-free


def test_guarded_select_branches_when_not_clampable():
    """A buffer of unknown size cannot be clamped safely: branches + phi instead."""
    n = Var("n")
    a = Buffer("A", (n,), "float32")
    c = Buffer("C", (n,), "float32")
    i = Var("i")
    far = Load(a, i * 100_000_000 + 1_000_000_000)
    body = For(i, const(0), n, ForKind.SERIAL,
               Store(c, i, Select(i >= 10, const(0.0), Select(i < 10, Load(a, i) * 2.0, far,
                                                                 guarded=True), guarded=True)))
    mod = build(PrimFunc("guard2", (a, c), body))
    assert "phi float" in mod.get_source()
    x, out = _rand("float32", 20), np.ones(20, "float32")
    mod(x, out)
    np.testing.assert_allclose(out, np.where(np.arange(20) < 10, x * 2, 0))


def test_if_then_else_let_likely_and_allocate():
    a = Buffer("A", (const(N),), "int32")
    c = Buffer("C", (const(N),), "int32")
    tmp = Buffer("tmp", (const(4),), "int32", scope="local")
    i, x = Var("i"), Var("x")
    cond = Call("bool", "likely", (binary(BinOpKind.EQ, i % 2, 0),))
    body = LetStmt(x, Load(a, i) * 3, seq(
        Store(tmp, const(0), x + 1),
        IfThenElse(cond, Store(c, i, Load(tmp, const(0))), Store(c, i, -x)),
        Evaluate(Call("int32", "tvm_storage_sync", ())),
    ))
    f = PrimFunc("ite", (a, c), For(i, const(0), const(N), ForKind.SERIAL, Allocate(tmp, body)))
    mod = build(f)
    v, out = _rand("int32"), np.zeros(N, "int32")
    mod(v, out)
    np.testing.assert_array_equal(out, np.where(np.arange(N) % 2 == 0, v * 3 + 1, -v * 3))


def test_heap_allocate_large_buffer():
    n = 100_000  # 400 KB: above the stack limit, so malloc'ed
    a = Buffer("A", (const(n),), "float32")
    c = Buffer("C", (const(n),), "float32")
    big = Buffer("big", (const(n),), "float32", scope="global")
    i, j = Var("i"), Var("j")
    body = Allocate(big, seq(
        For(i, const(0), const(n), ForKind.SERIAL, Store(big, i, Load(a, n - 1 - i))),
        For(j, const(0), const(n), ForKind.SERIAL, Store(c, j, Load(big, j) * 2.0))))
    mod = build(PrimFunc("heap", (a, c), body))
    assert "aligned_alloc" in mod.get_source()
    x, out = RNG.random(n).astype("float32"), np.zeros(n, "float32")
    mod(x, out)
    np.testing.assert_allclose(out, x[::-1] * 2)


def test_symbolic_shape():
    n = Var("n")
    a = Buffer("A", (n,), "float32")
    c = Buffer("C", (n,), "float32")
    i = Var("i")
    mod = build(PrimFunc("sym", (a, c), For(i, const(0), n, ForKind.SERIAL,
                                            Store(c, i, Load(a, i) + 1.0))))
    for size in (1, 7, 33):
        x, out = RNG.random(size).astype("float32"), np.zeros(size, "float32")
        mod(x, out)
        np.testing.assert_allclose(out, x + 1)


def test_verifier_runs_and_reports():
    with pytest.raises(CodegenError, match="invalid"):
        cc.compile_ir("define void @f() {\n  ret i32 0\n}\n", cc.host_spec())


def test_unbound_variable_and_thread_binding_rejected():
    a = Buffer("A", (const(4),), "float32")
    i, free = Var("i"), Var("free")
    with pytest.raises(CodegenError, match="free"):
        render(PrimFunc("f", (a,), For(i, const(0), const(4), ForKind.SERIAL,
                                       Store(a, i + free, const(1.0)))))
    with pytest.raises(CodegenError, match="cuda"):
        render(PrimFunc("g", (a,), For(i, const(0), const(4), ForKind.THREAD_BINDING,
                                       Store(a, i, const(1.0)), thread_tag="threadIdx.x")))


def test_compile_cache_hit():
    f = elementwise(_op(BinOpKind.ADD), ["float32"] * 2, "float32", 32, name="cached")
    r = render(f)
    t1: dict[str, float] = {}
    t2: dict[str, float] = {}
    o1 = cc.compile_ir(r.ir, cc.host_spec(), t1)
    o2 = cc.compile_ir(r.ir, cc.host_spec(), t2)
    assert o1 == o2 and t2["cache_hit"] == 1


def test_binop_vector_scalar_mix():
    # a scalar operand meeting a vector one is broadcast
    f = elementwise(lambda x: BinOp(BinOpKind.MUL, x, const(3.0), x.dtype), ["float32"],
                    "float32", N, lanes=4)
    mod = build(f)
    a, out = _rand("float32"), np.zeros(N, "float32")
    mod(a, out)
    np.testing.assert_allclose(out, a * 3)


GOLDEN_VADD4 = """\
define i32 @"vadd4"(ptr noalias %arg0, ptr noalias %arg1, ptr noalias %arg2) #0 {
entry:
  br label %for_body0
for_body0:
  %t1 = phi i64 [0, %entry], [%t9, %for_body0]
  %t2 = mul nsw i64 %t1, 4
  %t3 = getelementptr inbounds float, ptr %arg0, i64 %t2
  %t4 = load <4 x float>, ptr %t3, align 4
  %t5 = getelementptr inbounds float, ptr %arg1, i64 %t2
  %t6 = load <4 x float>, ptr %t5, align 4
  %t7 = fadd contract <4 x float> %t4, %t6
  %t8 = getelementptr inbounds float, ptr %arg2, i64 %t2
  store <4 x float> %t7, ptr %t8, align 4
  %t9 = add nsw i64 %t1, 1
  %t10 = icmp slt i64 %t9, 2
  br i1 %t10, label %for_body0, label %for_end0
for_end0:
  ret i32 0
}
"""


def test_golden_llvm_ir_vector_add():
    """Golden text of the kernel function for a fixed vector-add (rotated loop, 64-bit index,
    stride-1 vector loads/stores, FMA-contractable add)."""
    f = elementwise(_op(BinOpKind.ADD), ["float32"] * 2, "float32", 8, lanes=4, name="vadd4")
    ir = render(f, x86=False).ir
    start = ir.index('define i32 @"vadd4"')
    end = ir.index("}\n", start) + 2
    assert ir[start:end] == GOLDEN_VADD4
