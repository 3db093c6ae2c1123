"""CUDA C rendering, launch extraction, passes, resource limits and nvcc compilation."""

from __future__ import annotations

import re

import pytest

from templtune.codegen.cuda import examples as ex
from templtune.codegen.cuda.build import CudaLimits, limits_from_target
from templtune.codegen.cuda.compile import compile_cuda, find_nvcc
from templtune.errors import CodegenError, InstantiationError
from templtune.lower.ir import Buffer, For, ForKind, Load, PrimFunc, Store, seq
from templtune.runtime.cuda.module import build_cuda
from templtune.te.expr import BinOp, BinOpKind, Call, Var, const

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path_factory.getbasetemp() / "cuda"))


def src(example, **kw):
    return build_cuda(example[0], compile=False, **kw)


def test_vector_add_launch_and_source():
    m = src(ex.vector_add(n=1000, threads=64))
    (launch,) = m.launches
    assert launch.grid == (16, 1, 1) and launch.block == (64, 1, 1)
    assert launch.name == "default_function_kernel0"
    s = m.get_source()
    assert ('extern "C" __global__ void __launch_bounds__(64) default_function_kernel0('
            "float* __restrict__ A, float* __restrict__ B, float* __restrict__ C)") in s
    assert "((int)blockIdx.x)" in s and "((int)threadIdx.x)" in s
    assert "for (" not in s  # binding loops disappear
    assert "< 1000)" in s     # the guard


def test_matmul_barriers_placed_like_tvm():
    m = src(ex.tiled_matmul())
    s = m.get_source()
    assert s.count("__syncthreads();") == 2
    body = s[s.index("for (int ko"):]
    lines = [x.strip() for x in body.splitlines()]
    # barrier at the top of the k loop (write-after-read), then loads, then barrier, then compute
    assert lines[1] == "__syncthreads();"
    k = lines.index("__syncthreads();", 2)
    assert any("A_shared[" in x and "= A[" in x for x in lines[2:k])
    assert lines[k + 1].startswith("for (int ki")
    assert "__shared__ float A_shared[64];" in s and "float C_local[1];" in s
    assert m.launches[0].block == (8, 8, 1) and m.launches[0].shared_bytes == 512


def test_vthread_expands_local_and_interleaves():
    m = src(ex.tiled_matmul(vt=2))
    s = m.get_source()
    assert "vthread" not in s and "vx" not in s
    assert "float C_local[2];" in s and "__shared__ float B_shared[128];" in s
    assert "C_local[1] = (C_local[1] +" in s
    assert s.count("__syncthreads();") == 2  # the shared loads are not replicated
    assert m.launches[0].grid == (2, 4, 1)


def test_explicit_unroll_and_pragma_unroll():
    explicit = src(ex.tiled_matmul(unroll=16, explicit=1)).get_source()
    assert "for (int ki" not in explicit and "A_shared[((((int)threadIdx.y) * 8) + 7)]" in explicit
    pragma = src(ex.tiled_matmul(unroll=16, explicit=0)).get_source()
    assert re.search(r"#pragma unroll\n\s*for \(int ki", pragma)
    small = src(ex.tiled_matmul(unroll=4, explicit=1)).get_source()
    assert "for (int ki" in small and "#pragma unroll" not in small


def test_vector_copy_float4_only_when_aligned():
    aligned = src(ex.vector_copy_exp(lanes=4)).get_source()
    assert "*(float4*)(A_shared + (((int)threadIdx.x) * 4)) = *(float4*)(A + " in aligned
    assert "expf(" in aligned and "? expf(" in aligned  # guarded select -> ?:
    f2 = src(ex.vector_copy_exp(lanes=2)).get_source()
    assert "*(float2*)" in f2
    mis = src(ex.vector_copy_exp(lanes=4, offset=1)).get_source()
    assert "float4" not in mis and "#pragma unroll" in mis


def _single_thread_func(body_fn, n=8, name="f"):
    a = Buffer("A", (const(n),), "float32")
    b = Buffer("B", (const(n),), "float32")
    tx = Var("tx")
    return PrimFunc(name, (a, b), For(tx, const(0), const(n), ForKind.THREAD_BINDING,
                                      body_fn(a, b, tx), "threadIdx.x"))


def test_limits_raise_instantiation_error():
    with pytest.raises(InstantiationError, match="threads per block"):
        build_cuda(ex.vector_add(n=4096, threads=2048)[0], compile=False)
    with pytest.raises(InstantiationError, match="shared memory"):
        build_cuda(ex.vector_copy_exp(n=1 << 15, threads=1024, lanes=16)[0], compile=False)
    lim = CudaLimits(max_registers_per_block=64 * 64 - 1)
    from templtune.codegen.cuda.build import check_limits, lower_to_kernels

    kernels, _ = lower_to_kernels(ex.tiled_matmul(vt=2)[0])
    check_limits(kernels, CudaLimits())
    with pytest.raises(InstantiationError, match="registers"):
        check_limits(kernels, CudaLimits(max_registers_per_block=2 * 64 - 1))
    assert lim.arch == "sm_90"


def test_limits_from_target():
    from templtune.target import Target

    lim = limits_from_target(Target("cuda -arch=sm_80 -max_threads_per_block=512"))
    assert lim.arch == "sm_80" and lim.max_threads_per_block == 512
    assert limits_from_target(None) == CudaLimits()
    with pytest.raises(InstantiationError):
        build_cuda(ex.vector_add(threads=1024)[0], "cuda -max_threads_per_block=512",
                   compile=False)


def test_floordiv_helpers_only_for_possibly_negative():
    def body(a, b, tx):
        neg = BinOp(BinOpKind.FLOORDIV, tx - 3, const(2), "int32")
        pos = BinOp(BinOpKind.FLOORMOD, tx, const(2), "int32")
        return Store(b, tx, Load(a, BinOp(BinOpKind.FLOORMOD, neg + 8, const(8), "int32"))
                     + Load(a, pos))

    s = build_cuda(_single_thread_func(body), compile=False).get_source()
    assert "tt_floordiv((((int)threadIdx.x) - 3), 2)" in s
    assert "(((int)threadIdx.x) % 2)" in s


def test_unbound_memory_access_is_an_error():
    a = Buffer("A", (const(4),), "float32")
    i = Var("i")
    f = PrimFunc("f", (a,), For(i, const(0), const(4), ForKind.SERIAL, Store(a, i, const(1.0))))
    with pytest.raises(CodegenError, match="bind"):
        build_cuda(f, compile=False)


def test_two_kernels_with_workspace():
    a = Buffer("A", (const(64),), "float32")
    t = Buffer("T", (const(64),), "float32")
    b = Buffer("B", (const(64),), "float32")
    from templtune.lower.ir import Allocate

    def k(dst, src_buf, scale):
        tx = Var("tx")
        return For(tx, const(0), const(64), ForKind.THREAD_BINDING,
                   Store(dst, tx, Load(src_buf, tx) * scale), "threadIdx.x")

    f = PrimFunc("two", (a, b), Allocate(t, seq(k(t, a, 2.0), k(b, t, 3.0))))
    m = build_cuda(f, compile=False)
    assert [x.name for x in m.launches] == ["two_kernel0", "two_kernel1"]
    assert m.launches[0].args == (0, 2) and m.launches[1].args == (1, 2)
    assert m.workspace[0].shape == (64,)
    import numpy as np

    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    m.emulate(x, y)
    np.testing.assert_allclose(y, x * 6)


def test_intrinsics_render():
    def body(a, b, tx):
        x = Load(a, tx)
        v = (Call("float32", "sigmoid", (x,)) + Call("float32", "tanh", (x,))
             + Call("float32", "sqrt", (x,)) + Call("float32", "log", (x,)))
        return Store(b, tx, v)

    s = build_cuda(_single_thread_func(body), compile=False).get_source()
    for fn in ("expf(", "tanhf(", "sqrtf(", "logf("):
        assert fn in s


@pytest.mark.cuda
@needs_nvcc
@pytest.mark.parametrize("make", [
    lambda: ex.vector_add(), lambda: ex.tiled_matmul(vt=2, unroll=16, explicit=1),
    lambda: ex.tiled_matmul(unroll=512), lambda: ex.vector_copy_exp(),
    lambda: ex.vector_copy_exp(offset=1, lanes=2),
])
def test_examples_compile_with_nvcc(make):
    m = build_cuda(make()[0])
    assert m.binary and m.binary[:4] == b"\x7fELF"


@pytest.mark.cuda
@needs_nvcc
def test_nvcc_error_is_codegen_error_and_cache_hits(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path))
    with pytest.raises(CodegenError, match="nvcc failed"):
        compile_cuda('extern "C" __global__ void k() { undefined_thing(); }')
    ok = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 1.0f; }'
    first = compile_cuda(ok)
    assert len(list(tmp_path.glob("*.cubin"))) == 1
    assert compile_cuda(ok) == first
    ptx = compile_cuda(ok, fmt="ptx").decode()
    assert ".entry k" in ptx


GOLDEN_MATMUL = """\
// CUDA C generated by templtune

extern "C" __global__ void __launch_bounds__(16) default_function_kernel0(float* __restrict__ A, float* __restrict__ B, float* __restrict__ C) {
  __shared__ float A_shared[16];
  __shared__ float B_shared[32];
  float C_local[2];
  C_local[0] = 0.000000e+00f;
  C_local[1] = 0.000000e+00f;
  for (int ko = 0; ko < 4; ++ko) {
    __syncthreads();
    A_shared[((((int)threadIdx.y) * 4) + ((int)threadIdx.x))] = A[(((((((int)blockIdx.y) * 4) + ((int)threadIdx.y)) * 16) + (ko * 4)) + ((int)threadIdx.x))];
    B_shared[((((int)threadIdx.y) * 8) + ((int)threadIdx.x))] = B[(((((ko * 4) + ((int)threadIdx.y)) * 16) + (((int)blockIdx.x) * 8)) + ((int)threadIdx.x))];
    B_shared[(((((int)threadIdx.y) * 8) + 4) + ((int)threadIdx.x))] = B[((((((ko * 4) + ((int)threadIdx.y)) * 16) + (((int)blockIdx.x) * 8)) + 4) + ((int)threadIdx.x))];
    __syncthreads();
    for (int ki = 0; ki < 4; ++ki) {
      C_local[0] = (C_local[0] + (A_shared[((((int)threadIdx.y) * 4) + ki)] * B_shared[((ki * 8) + ((int)threadIdx.x))]));
      C_local[1] = (C_local[1] + (A_shared[((((int)threadIdx.y) * 4) + ki)] * B_shared[(((ki * 8) + 4) + ((int)threadIdx.x))]));
    }
  }
  C[(((((((int)blockIdx.y) * 4) + ((int)threadIdx.y)) * 16) + (((int)blockIdx.x) * 8)) + ((int)threadIdx.x))] = C_local[0];
  C[((((((((int)blockIdx.y) * 4) + ((int)threadIdx.y)) * 16) + (((int)blockIdx.x) * 8)) + 4) + ((int)threadIdx.x))] = C_local[1];
}
"""


def test_golden_cuda_source_tiled_matmul_vthread():
    """Fixed config: vthread 2, explicit unroll budget 4 (the 2-way B fetch unrolls, the k loop
    with 8 steps does not), barriers at the top of the k loop and before the compute."""
    func = ex.tiled_matmul(m=16, n=16, k=16, tile=4, vt=2, unroll=4, explicit=1)[0]
    assert build_cuda(func, compile=False).get_source() == GOLDEN_MATMUL


def test_many_vthreads_become_a_loop_over_expanded_locals():
    import numpy as np

    from templtune.runtime.cuda.emulate import emulate

    func, make, ref = ex.tiled_matmul(m=4, n=36, k=4, tile=2, vt=18)
    src = build_cuda(func, compile=False).get_source()
    assert "float C_local[18];" in src and "for (int vx_s = 0; vx_s < 18; ++vx_s)" in src
    args = make(np.random.default_rng(0))
    emulate(func, *args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5)


@pytest.mark.cuda
@needs_nvcc
def test_half_and_int64_kernels_compile():
    from templtune.te.expr import Cast

    a = Buffer("A", (const(64),), "float16")
    b = Buffer("B", (const(64),), "float16")
    tx = Var("tx")
    body = Store(b, tx, Cast("float16", Cast("float32", Load(a, tx)) * const(2.0)))
    f = PrimFunc("h", (a, b), For(tx, const(0), const(64), ForKind.THREAD_BINDING, body,
                                  "threadIdx.x"))
    m = build_cuda(f)
    assert "#include <cuda_fp16.h>" in m.source and "half* __restrict__ A" in m.source
    c = Buffer("C", (const(64),), "float32")
    i64 = Cast("int64", tx) * const(1, "int64")
    g = PrimFunc("l", (c,), For(tx, const(0), const(64), ForKind.THREAD_BINDING,
                                Store(c, i64, const(1.0)), "threadIdx.x"))
    m2 = build_cuda(g)
    assert "((long long)" in m2.source
