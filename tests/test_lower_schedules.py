"""Hand schedules using every primitive, lowered and run by the loop-IR interpreter vs numpy."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te, topi
from templtune.lower.interp import run
from templtune.lower.ir import For, ForKind, Load, Ramp, Store
from templtune.te.functor import post_order
from templtune.topi.testing import conv2d_nchw_python

RNG = np.random.default_rng(0)


def _rand(*shape: int) -> np.ndarray:
    return RNG.random(shape, dtype=np.float64).astype("float32")


def matmul(n: int = 12, m: int = 10, kk: int = 9):
    A = te.placeholder((n, kk), name="A")
    B = te.placeholder((kk, m), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def check_matmul(s, A, B, C) -> templtune.lower.ir.PrimFunc:
    f = templtune.lower(s, [A, B, C])
    n, kk = (int(x) for x in A.shape)
    m = int(B.shape[1])
    a, b = _rand(n, kk), _rand(kk, m)
    c = np.zeros((n, m), "float32")
    execute(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    return f


def _has_threads(f) -> bool:
    return any(isinstance(n, For) and n.kind is ForKind.THREAD_BINDING for n in post_order(f.body))


def emulate_gpu(f, *arrays: np.ndarray) -> bool:
    """Run ``f`` under GPU semantics (threads in lockstep, race detection) with the CUDA
    emulator when it is available; False when it is not."""
    try:
        from templtune.runtime.cuda.emulate import emulate
    except ImportError:  # pragma: no cover - CUDA backend not present
        return False
    emulate(f, *arrays)
    return True


def execute(f, *arrays: np.ndarray, gpu: bool = True) -> None:
    """Run ``f`` with the interpreter (writing ``arrays``); also build CPU functions with the
    LLVM backend and run GPU functions in the CUDA emulator, checking they compute the same."""
    copies = [a.copy() for a in arrays]
    run(f, *arrays)
    if _has_threads(f):
        if gpu and emulate_gpu(f, *copies):
            for x, y in zip(arrays, copies):
                np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)
        return
    try:
        mod = templtune.build(f, target="llvm")
    except ImportError:  # pragma: no cover - backend not installed
        return
    mod(*copies)
    for x, y in zip(arrays, copies):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)


def kinds(f) -> list[ForKind]:
    return [n.kind for n in post_order(f.body) if isinstance(n, For)]


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


def _conv(n, ci, h, w, co, k, stride, pad):
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, k, k), name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, stride, pad, dilation=1, out_dtype="float32")
    return data, kernel, out


def _check_conv(s, data, kernel, out, stride, pad):
    f = templtune.lower(s, [data, kernel, out])
    d = _rand(*(int(x) for x in data.shape))
    w = _rand(*(int(x) for x in kernel.shape))
    o = np.zeros(tuple(int(x) for x in out.shape), "float32")
    execute(f, d, w, o)
    np.testing.assert_allclose(o, conv2d_nchw_python(d, w, stride, pad), rtol=1e-4, atol=1e-5)
    return f


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (1, 0), (2, 2)])
def test_conv2d_nchw_cpu_schedule(stride, pad):
    data, kernel, out = _conv(1, 4, 7, 7, 8, 3, stride, pad)
    s = te.create_schedule(out.op)
    padt = out.op.input_tensors[0]
    CC = s.cache_write(out, "global")
    n, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, 4)
    xo, xi = s[out].split(x, 3)
    s[out].reorder(n, fo, y, xo, xi, fi)
    s[out].vectorize(fi)
    par = s[out].fuse(n, fo)
    s[out].parallel(par)
    s[CC].compute_at(s[out], xo)
    cn, cf, cy, cx = s[CC].op.axis
    rc, ry, rx = s[CC].op.reduce_axis
    rco, rci = s[CC].split(rc, 2)
    s[CC].reorder(rco, ry, rx, rci, cn, cy, cx, cf)
    s[CC].vectorize(cf)
    s[CC].unroll(cx)
    s[padt].compute_at(s[out], par)
    _check_conv(s, data, kernel, out, stride, pad)


def test_conv2d_inline_pad():
    data, kernel, out = _conv(1, 3, 6, 5, 4, 3, 1, 1)
    s = te.create_schedule(out.op)
    s[out.op.input_tensors[0]].compute_inline()
    _check_conv(s, data, kernel, out, 1, 1)


def test_depthwise_conv2d():
    data = te.placeholder((1, 4, 8, 8), name="data")
    kernel = te.placeholder((4, 1, 3, 3), name="kernel")
    out = topi.nn.depthwise_conv2d_nchw(data, kernel, 2, 1, dilation=1, out_dtype="float32")
    s = te.create_schedule(out.op)
    padt = out.op.input_tensors[0]
    n, c, y, x = s[out].op.axis
    yo, yi = s[out].split(y, 2)
    s[padt].compute_at(s[out], yo)
    s[out].unroll(yi)
    f = templtune.lower(s, [data, kernel, out])
    d, w = _rand(1, 4, 8, 8), _rand(4, 1, 3, 3)
    o = np.zeros((1, 4, 4, 4), "float32")
    execute(f, d, w, o)
    ref = np.concatenate([conv2d_nchw_python(d[:, i:i + 1], w[i:i + 1], 2, 1) for i in range(4)],
                         axis=1)
    np.testing.assert_allclose(o, ref, rtol=1e-5)


def _gpu_conv(cfg, n=1, h=7, w=6, co=8, ci=4):
    def apply(s, st, ax, sizes):
        outs = []
        for f in reversed(sizes[1:]):
            ax, inner = s[st].split(ax, factor=f)
            outs.append(inner)
        return [ax] + outs[::-1]

    data, kernel, conv = _conv(n, ci, h, w, co, 3, 1, 1)
    s = te.create_schedule([conv.op])
    s[conv.op.input_tensors[0]].compute_inline()
    pad_data = s[conv].op.input_tensors[0]
    OL = s.cache_write(conv, "local")
    AA = s.cache_read(pad_data, "shared", [OL])
    WW = s.cache_read(kernel, "shared", [OL])
    AL = s.cache_read(AA, "local", [OL])
    WL = s.cache_read(WW, "local", [OL])
    n_, f, y, x = s[conv].op.axis
    bf, vf, tf, fi = apply(s, conv, f, cfg["tile_f"])
    by, vy, ty, yi = apply(s, conv, y, cfg["tile_y"])
    bx, vx, tx, xi = apply(s, conv, x, cfg["tile_x"])
    for ax, tag in [(bf, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"), (vf, "vthread"),
                    (vy, "vthread"), (vx, "vthread"), (tf, "threadIdx.z"),
                    (ty, "threadIdx.y"), (tx, "threadIdx.x")]:
        s[conv].bind(ax, te.thread_axis(tag))
    s[conv].reorder(n_, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    s[OL].compute_at(s[conv], tx)
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rcm, rci = apply(s, OL, rc, cfg["tile_rc"])
    ryo, rym = apply(s, OL, ry, cfg["tile_ry"])
    rxo, rxm = apply(s, OL, rx, cfg["tile_rx"])
    s[OL].reorder(rco, ryo, rxo, rcm, rym, rxm, rci, *s[OL].op.axis)
    s[AA].compute_at(s[OL], rxo)
    s[WW].compute_at(s[OL], rxo)
    s[AL].compute_at(s[OL], rxm)
    s[WL].compute_at(s[OL], rxm)
    for load in [AA, WW]:
        fused = s[load].fuse(*s[load].op.axis)
        tz, fused = s[load].split(fused, nparts=cfg["tile_f"][2])
        ty2, fused = s[load].split(fused, nparts=cfg["tile_y"][2])
        tx2, fused = s[load].split(fused, nparts=cfg["tile_x"][2])
        s[load].bind(tz, te.thread_axis("threadIdx.z"))
        s[load].bind(ty2, te.thread_axis("threadIdx.y"))
        s[load].bind(tx2, te.thread_axis("threadIdx.x"))
    s[conv].pragma(n_, "auto_unroll_max_step", cfg["auto_unroll_max_step"])
    s[conv].pragma(n_, "unroll_explicit", cfg["unroll_explicit"])
    return s, data, kernel, conv


@pytest.mark.parametrize("explicit", [0, 1])
def test_gpu_conv2d_template_schedule(explicit):
    cfg = dict(tile_f=[2, 2, 2, 1], tile_y=[2, 1, 2, 2], tile_x=[3, 1, 2, 1], tile_rc=[2, 1, 2],
               tile_ry=[3, 1], tile_rx=[1, 3], auto_unroll_max_step=16, unroll_explicit=explicit)
    s, data, kernel, conv = _gpu_conv(cfg)
    f = _check_conv(s, data, kernel, conv, 1, 1)
    tags = {n.thread_tag for n in post_order(f.body)
            if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING}
    assert tags == {"blockIdx.z", "blockIdx.y", "blockIdx.x", "vthread", "threadIdx.z",
                    "threadIdx.y", "threadIdx.x"}
    text = str(f)
    assert "storage_scope = shared" in text and "storage_scope = local" in text


def test_gpu_matmul_shared_vthread_vectorized_fetch():
    n = 32
    A, B, C = matmul(n, n, n)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, 8)
    jo, ji = s[C].split(j, 8)
    s[C].reorder(io, jo, ii, ji)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    vi, ii2 = s[C].split(ii, nparts=2)
    tyo, tyi = s[C].split(ii2, 2)
    s[C].reorder(vi, tyo, ji, tyi)
    s[C].bind(vi, te.thread_axis((0, 2), "vthread", name="vx"))
    ty, tx = te.thread_axis("threadIdx.y"), te.thread_axis("threadIdx.x")
    s[C].bind(tyo, ty)
    jo2, ji2 = s[C].split(ji, 2)
    s[C].bind(jo2, tx)
    s[CL].compute_at(s[C], jo2)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], 4)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    s[CL].unroll(ki)
    s[AA].compute_at(s[CL], ko)
    s[BB].compute_at(s[CL], ko)
    for X in (AA, BB):
        fused = s[X].fuse(*s[X].op.axis)
        t1, fused = s[X].split(fused, nparts=2)
        t2, fused = s[X].split(fused, nparts=4)
        s[X].bind(t1, ty)
        s[X].bind(t2, tx)
        s[X].vectorize(fused)
    f = check_matmul(s, A, B, C)
    stores = [n for n in post_order(f.body) if isinstance(n, Store) and n.buffer.name == "A.shared"]
    assert stores and isinstance(stores[0].index, Ramp)
    assert any(isinstance(n, Load) and isinstance(n.index, Ramp) for n in post_order(f.body))


def test_rfactor_cross_thread_bind():
    A = te.placeholder((4, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=8)
    BF = s.rfactor(B, ki)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    f = templtune.lower(s, [A, B])
    a, b = _rand(4, 32), np.zeros(4, "float32")
    # NOTE: serial semantics only: a cross-thread reduction is not lowered to an allreduce
    execute(f, a, b, gpu=False)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)


def test_lower_is_fast_for_seed_conv2d():
    import time

    data, kernel, out = _conv(1, 512, 7, 7, 512, 3, 1, 1)
    s = te.create_schedule(out.op)
    CC = s.cache_write(out, "global")
    n, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, 16)
    s[out].reorder(n, fo, y, x, fi)
    s[out].vectorize(fi)
    s[out].parallel(s[out].fuse(n, fo))
    s[CC].compute_at(s[out], y)
    rco, rci = s[CC].split(s[CC].op.reduce_axis[0], 4)
    cn, cf, cy, cx = s[CC].op.axis
    s[CC].reorder(rco, *s[CC].op.reduce_axis[1:], rci, cn, cy, cx, cf)
    s[CC].vectorize(cf)
    s[CC].unroll(cx)
    templtune.lower(s, [data, kernel, out])
    t = time.perf_counter()
    templtune.lower(s, [data, kernel, out])
    assert time.perf_counter() - t < 0.1


def test_topi_softmax_pool_dense_and_where_reduction():
    from templtune.topi import testing as tt

    X = te.placeholder((3, 7), name="X")
    Y = topi.nn.softmax(X)
    x, y = _rand(3, 7), np.zeros((3, 7), "float32")
    execute(templtune.lower(te.create_schedule(Y.op), [X, Y]), x, y)
    np.testing.assert_allclose(y, tt.softmax_python(x), rtol=1e-5)

    X = te.placeholder((1, 2, 6, 6), name="X")
    P = topi.nn.pool2d(X, (3, 3), (2, 2), (1, 1), "max")
    x, p = _rand(1, 2, 6, 6), np.zeros((1, 2, 3, 3), "float32")
    execute(templtune.lower(te.create_schedule(P.op), [X, P]), x, p)
    np.testing.assert_allclose(p, tt.pool2d_python(x, (3, 3), (2, 2), (1, 1), "max"), rtol=1e-5)

    A = te.placeholder((5, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k], axis=k, where=k <= i), name="B")
    a, b = _rand(5, 5), np.zeros(5, "float32")
    execute(templtune.lower(te.create_schedule(B.op), [A, B]), a, b)
    np.testing.assert_allclose(b, np.tril(a).sum(1), rtol=1e-5)

    D = te.placeholder((4, 6), name="D")
    W = te.placeholder((5, 6), name="W")
    bias = te.placeholder((5,), name="bias")
    R = topi.nn.relu(topi.nn.dense(D, W, bias))
    s = te.create_schedule(R.op)
    s[R.op.input_tensors[0]].compute_at(s[R], s[R].op.axis[0])
    d, w, bv = _rand(4, 6) - 0.5, _rand(5, 6) - 0.5, _rand(5)
    r = np.zeros((4, 5), "float32")
    execute(templtune.lower(s, [D, W, bias, R]), d, w, bv, r)
    np.testing.assert_allclose(r, np.maximum(d @ w.T + bv, 0), rtol=1e-5, atol=1e-6)


def test_thread_axis_with_larger_declared_extent_is_guarded():
    from templtune.errors import LoweringError

    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], 50)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis((0, 64), "threadIdx.x"))
    f = templtune.lower(s, [A, B])
    assert '"thread_extent" = 64;' in str(f) and "(threadIdx.x < 50)" in str(f)
    a, b = _rand(100), np.zeros(100, "float32")
    execute(f, a, b)
    np.testing.assert_allclose(b, 2 * a)
    s2 = te.create_schedule(B.op)
    s2[B].bind(B.op.axis[0], te.thread_axis((0, 32), "threadIdx.x"))
    with pytest.raises(LoweringError, match="extent 32 but the axis needs 100"):
        templtune.lower(s2, [A, B])


def test_multi_value_reduction_argmax():
    def fcombine(x, y):
        better = x[1] >= y[1]
        return te.select(better, x[0], y[0]), te.select(better, x[1], y[1])

    argmax = te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)),
                             name="argmax")
    m, n = 5, 7
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="float32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    s[T0].split(k, 3)
    f = templtune.lower(s, [idx, val, T0, T1])
    iv = np.tile(np.arange(n, dtype="int32"), (m, 1))
    vv = _rand(m, n)
    o0, o1 = np.zeros(m, "int32"), np.zeros(m, "float32")
    execute(f, iv, vv, o0, o1)
    np.testing.assert_array_equal(o0, vv.argmax(1))
    np.testing.assert_allclose(o1, vv.max(1))
