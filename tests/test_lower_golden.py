"""Golden text of lowered functions (TVM-like TIR printout); deterministic by design."""

from __future__ import annotations

import templtune
from templtune import te


def golden_matmul():
    A = te.placeholder((64, 64), name="A")
    B = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[C].parallel(io)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], 4)
    s[CC].reorder(ko, ki, ci, cj)
    s[CC].vectorize(cj)
    s[CC].unroll(ki)
    return templtune.lower(s, [A, B, C])

def golden_gpu():
    A = te.placeholder((1024,), name="A")
    B = te.compute((1000,), lambda i: A[i] + A[i + 24], name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bx, tx = s[B].split(s[B].op.axis[0], 64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], bx)
    ao, ai = s[AS].split(s[AS].op.axis[0], nparts=64)
    s[AS].bind(ao, te.thread_axis("threadIdx.x"))
    return templtune.lower(s, [A, B])

def golden_elemwise():
    A = te.placeholder((10, 30), name="A")
    B = te.compute((10, 30), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((10, 30), lambda i, j: te.exp(B[i, j]), name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    f = s[C].fuse(*s[C].op.axis)
    fo, fi = s[C].split(f, 8)
    s[C].parallel(fo)
    return templtune.lower(s, [A, C])


GOLDEN_MATMUL = """\
@main = primfn(A_1: handle, B_1: handle, C_1: handle) -> ()
  attr = {"global_symbol": "main", "tir.noalias": True}
  buffers = {A: Buffer(A_2: Pointer(float32), float32, [64, 64], []), B: Buffer(B_2: Pointer(float32), float32, [64, 64], []), C: Buffer(C_2: Pointer(float32), float32, [64, 64], [])}
  buffer_map = {A_1: A, B_1: B, C_1: C} {
  for (i.outer: int32, 0, 8) "parallel" {
    for (j.outer: int32, 0, 4) {
      allocate(C.local: Pointer(local float32), float32, [128]), storage_scope = local;
      for (i.c.init: int32, 0, 8) {
        C.local[ramp((i.c.init * 16), 1, 16)] = broadcast(0.0f, 16)
      }
      for (k.outer: int32, 0, 16) {
        for (i.c: int32, 0, 8) {
          C.local[ramp((i.c * 16), 1, 16)] = (C.local[ramp((i.c * 16), 1, 16)] + (broadcast(A[(((i.outer * 512) + (i.c * 64)) + (k.outer * 4))], 16) * B[ramp(((k.outer * 256) + (j.outer * 16)), 1, 16)]))
        }
        for (i.c: int32, 0, 8) {
          C.local[ramp((i.c * 16), 1, 16)] = (C.local[ramp((i.c * 16), 1, 16)] + (broadcast(A[((((i.outer * 512) + (i.c * 64)) + (k.outer * 4)) + 1)], 16) * B[ramp((((k.outer * 256) + (j.outer * 16)) + 64), 1, 16)]))
        }
        for (i.c: int32, 0, 8) {
          C.local[ramp((i.c * 16), 1, 16)] = (C.local[ramp((i.c * 16), 1, 16)] + (broadcast(A[((((i.outer * 512) + (i.c * 64)) + (k.outer * 4)) + 2)], 16) * B[ramp((((k.outer * 256) + (j.outer * 16)) + 128), 1, 16)]))
        }
        for (i.c: int32, 0, 8) {
          C.local[ramp((i.c * 16), 1, 16)] = (C.local[ramp((i.c * 16), 1, 16)] + (broadcast(A[((((i.outer * 512) + (i.c * 64)) + (k.outer * 4)) + 3)], 16) * B[ramp((((k.outer * 256) + (j.outer * 16)) + 192), 1, 16)]))
        }
      }
      for (i.inner: int32, 0, 8) {
        C[ramp((((i.outer * 512) + (i.inner * 64)) + (j.outer * 16)), 1, 16)] = C.local[ramp((i.inner * 16), 1, 16)]
      }
    }
  }
}
"""

GOLDEN_GPU = """\
@main = primfn(A_1: handle, B_1: handle) -> ()
  attr = {"global_symbol": "main", "tir.noalias": True}
  buffers = {A: Buffer(A_2: Pointer(float32), float32, [1024], []), B: Buffer(B_2: Pointer(float32), float32, [1000], [])}
  buffer_map = {A_1: A, B_1: B} {
  attr [IterVar(blockIdx.x: int32, (nullptr), "ThreadIndex", "blockIdx.x")] "thread_extent" = 16;
  allocate(A.shared: Pointer(shared float32), float32, [88]), storage_scope = shared;
  attr [IterVar(threadIdx.x_1: int32, (nullptr), "ThreadIndex", "threadIdx.x")] "thread_extent" = 64;
  for (ax0.inner: int32, 0, 2) {
    if @tir.likely(((((threadIdx.x_1 * 2) + ax0.inner) < 88) && ((((blockIdx.x * 64) + (threadIdx.x_1 * 2)) + ax0.inner) < 1024)), dtype=bool) {
      A.shared[((threadIdx.x_1 * 2) + ax0.inner)] = A[(((blockIdx.x * 64) + (threadIdx.x_1 * 2)) + ax0.inner)]
    }
  }
  attr [IterVar(threadIdx.x: int32, (nullptr), "ThreadIndex", "threadIdx.x")] "thread_extent" = 64;
  if @tir.likely((((blockIdx.x * 64) + threadIdx.x) < 1000), dtype=bool) {
    B[((blockIdx.x * 64) + threadIdx.x)] = (A.shared[threadIdx.x] + A.shared[(threadIdx.x + 24)])
  }
}
"""

GOLDEN_ELEMWISE = """\
@main = primfn(A_1: handle, C_1: handle) -> ()
  attr = {"global_symbol": "main", "tir.noalias": True}
  buffers = {A: Buffer(A_2: Pointer(float32), float32, [10, 30], []), C: Buffer(C_2: Pointer(float32), float32, [10, 30], [])}
  buffer_map = {A_1: A, C_1: C} {
  for (i.j.fused.outer: int32, 0, 38) "parallel" {
    for (i.j.fused.inner: int32, 0, 8) {
      if @tir.likely((((i.j.fused.outer * 8) + i.j.fused.inner) < 300), dtype=bool) {
        C[((i.j.fused.outer * 8) + i.j.fused.inner)] = exp((A[((i.j.fused.outer * 8) + i.j.fused.inner)] * 2.0f))
      }
    }
  }
}
"""


def _check(func, expected: str) -> None:
    got = str(func).strip()
    assert got == expected.strip(), "\n" + got


def test_golden_matmul_cpu():
    _check(golden_matmul(), GOLDEN_MATMUL)


def test_golden_gpu_shared_fetch():
    _check(golden_gpu(), GOLDEN_GPU)


def test_golden_elementwise_fused_guarded():
    _check(golden_elemwise(), GOLDEN_ELEMWISE)


def test_printing_is_deterministic():
    assert str(golden_gpu()) == str(golden_gpu())
