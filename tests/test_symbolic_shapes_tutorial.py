"""Symbolic shapes in the vector-add cells of TVM's tutorial "Working with Operators Using
Tensor Expression", with only the imports changed: the CPU cells (naive, parallel, vectorized) and
the GPU cells on the CUDA emulator; the built functions take arrays of any size, numpy is the
oracle."""

from __future__ import annotations

import numpy as np
import pytest
from symbolic_shapes_helpers import _check_sizes

import templtune as tvm
import templtune.testing
from templtune import te
from templtune.errors import RuntimeCallError


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
