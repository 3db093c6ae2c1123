"""Symbolic shapes on CUDA (the emulator runs nvcc's kernels): a symbolic matmul on a 2-D grid
and with shared-memory tiles against numpy, and the refused symbolic thread extent."""

from __future__ import annotations

import pytest
from symbolic_shapes_helpers import _matmul, _run_matmul, _vector_add

import templtune as tvm
from templtune import te


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
