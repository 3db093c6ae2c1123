"""Loop-IR passes, verifier and interpreter on hand-built IR."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te
from templtune.errors import LoweringError
from templtune.lower.interp import compile_func, run, source
from templtune.lower.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Load,
    PrimFunc,
    Ramp,
    Store,
    seq,
)
from templtune.lower.passes import unroll_loops
from templtune.lower.printer import func_str, stmt_str
from templtune.lower.vectorize import vectorize_loops
from templtune.lower.verify import verify
from templtune.te.expr import BinOp, BinOpKind, Call, Var, const
from templtune.te.functor import post_order


def _bufs():
    a = Buffer("A", (const(16),), "float32")
    b = Buffer("B", (const(16),), "float32")
    return a, b


def test_vectorize_affine_and_strided():
    a, b = _bufs()
    i = Var("i")
    body = Store(b, i, Load(a, i) * 2.0 + 1.0)
    out = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED, body))
    assert isinstance(out, Store) and isinstance(out.index, Ramp)
    assert out.value.dtype == "float32x8"
    x = np.arange(16, dtype="float32")
    y = np.zeros(16, "float32")
    run(PrimFunc("f", (a, b), out), x, y)
    np.testing.assert_allclose(y[:8], x[:8] * 2 + 1)
    # stride-2 loads stay vector (gather) loads
    out2 = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED,
                               Store(b, i, Load(a, i * 2))))
    assert isinstance(out2.value, Load) and int(out2.value.index.stride) == 2


def test_vectorize_fallbacks():
    a, b = _bufs()
    i, j = Var("i"), Var("j")
    inner = For(j, const(0), const(2), ForKind.SERIAL, Store(b, i + j, Load(a, i)))
    out = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED, inner))
    assert isinstance(out, For) and out.kind is ForKind.SERIAL
    guarded = IfThenElse(i < 5, Store(b, i, Load(a, i)))
    out = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED, guarded))
    assert out.kind is ForKind.SERIAL
    nonaffine = Store(b, i // 2, Load(a, i))
    out = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED, nonaffine))
    assert out.kind is ForKind.SERIAL
    invariant_store = Store(b, const(0), Load(a, i))
    out = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED, invariant_store))
    assert out.kind is ForKind.SERIAL


def test_unroll_explicit_and_annotated():
    a, b = _bufs()
    i = Var("i")
    loop = For(i, const(0), const(4), ForKind.UNROLLED, Store(b, i * 2, Load(a, i)))
    out = unroll_loops(loop)
    stores = [n for n in post_order(out) if isinstance(n, Store)]
    assert len(stores) == 4 and [int(s.index.value) for s in stores] == [0, 2, 4, 6]
    keep = For(i, const(0), const(4), ForKind.SERIAL, Store(b, i, Load(a, i)),
               annotations=(("pragma_auto_unroll_max_step", 8),
                            ("pragma_unroll_explicit", 0)))
    out = unroll_loops(keep)
    assert isinstance(out, For) and out.kind is ForKind.UNROLLED
    big = For(i, const(0), const(16), ForKind.SERIAL, Store(b, i, Load(a, i)),
              annotations=(("pragma_auto_unroll_max_step", 8),))
    assert unroll_loops(big).kind is ForKind.SERIAL


def test_verifier_rejects_bad_ir():
    a, b = _bufs()
    i, k = Var("i"), Var("k")
    with pytest.raises(LoweringError, match="variable k is used outside"):
        verify(PrimFunc("f", (a, b), For(i, const(0), const(4), ForKind.SERIAL,
                                          Store(b, i, Load(a, k)))))
    c = Buffer("C", (const(4),), "float32", "local")
    with pytest.raises(LoweringError, match="buffer C outside its allocation"):
        verify(PrimFunc("f", (a, b), Store(c, const(0), const(1.0))))
    verify(PrimFunc("f", (a, b), Allocate(c, Store(c, const(0), const(1.0)))))
    with pytest.raises(LoweringError, match="value has 4 lanes but the index has 1"):
        verify(PrimFunc("f", (a, b), Store(b, const(0), Broadcast(const(1.0), 4))))
    with pytest.raises(LoweringError, match="invalid thread tag 'warp.x'"):
        verify(PrimFunc("f", (a, b), For(i, const(0), const(4), ForKind.THREAD_BINDING,
                                          Store(b, i, Load(a, i)), thread_tag="warp.x")))
    with pytest.raises(LoweringError, match="carries a thread tag"):
        verify(PrimFunc("f", (a, b), For(i, const(0), const(4), ForKind.SERIAL,
                                          Store(b, i, Load(a, i)), thread_tag="threadIdx.x")))
    with pytest.raises(LoweringError, match="different lanes"):
        verify(PrimFunc("f", (a, b), Store(b, Ramp(const(0), const(1), 4),
                                           BinOp(BinOpKind.ADD,
                                                 Load(a, Ramp(const(0), const(1), 4)),
                                                 Broadcast(const(1.0), 2), "float32x4"))))


def test_interpreter_deep_nest_and_nan_fill():
    # 16 nested loops exceed Python's static block limit unless split into functions
    a = Buffer("A", tuple(const(2) for _ in range(16)), "float32")
    vs = [Var(f"i{k}") for k in range(16)]
    idx = const(0)
    for v in vs:
        idx = idx * 2 + v
    body = Store(a, idx, Call("float32", "exp", (const(0.0),)))
    for v in reversed(vs):
        body = For(v, const(0), const(2), ForKind.SERIAL, body)
    arr = np.zeros((2,) * 16, "float32")
    compile_func(PrimFunc("deep", (a,), body))(arr)
    assert (arr == 1).all()
    c = Buffer("C", (const(2),), "float32", "local")
    f = PrimFunc("nan", (a,), Allocate(c, Store(a, const(0), Load(c, const(1)))))
    arr[...] = 0
    run(f, arr)
    assert np.isnan(arr.reshape(-1)[0])
    assert "def _kernel" in source(f)


def test_printer_forms():
    a, b = _bufs()
    i = Var("i")
    t = Var("threadIdx.x")
    c = Buffer("C", (const(4),), "float32", "shared")
    body = For(t, const(0), const(4), ForKind.THREAD_BINDING, Allocate(c, seq(
        Store(c, t, Load(a, t)),
        IfThenElse(Call("bool", "likely", (t < 3,)),
                   For(i, const(0), const(2), ForKind.PARALLEL, Store(b, t * 2 + i, Load(c, t)))),
    )), thread_tag="threadIdx.x")
    text = func_str(PrimFunc("main", (a, b), body, (("global_symbol", "main"),)))
    assert '@main = primfn(A_1: handle, B_1: handle) -> ()' in text
    assert 'attr [IterVar(threadIdx.x: int32, (nullptr), "ThreadIndex", "threadIdx.x")] ' \
           '"thread_extent" = 4;' in text
    assert "allocate(C: Pointer(shared float32), float32, [4]), storage_scope = shared;" in text
    assert "if @tir.likely((threadIdx.x < 3), dtype=bool) {" in text
    assert 'for (i: int32, 0, 2) "parallel" {' in text
    assert stmt_str(Store(b, Ramp(const(0), const(1), 4), Broadcast(const(1.0), 4))) == \
        "B[ramp(0, 1, 4)] = broadcast(1.0f, 4)"


def test_lower_rejects_non_schedule_and_non_tensor_args():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(LoweringError, match="lower needs a Schedule"):
        templtune.lower(B, [A, B])
    with pytest.raises(LoweringError, match="args must be tensors"):
        templtune.lower(s, [A, 3])
    f = templtune.lower(s, [A, B], name="add_one")
    assert f.name == "add_one" and ("global_symbol", "add_one") in f.attrs
