"""Hand GPU schedules (thread and vthread binding, shared / local caches, vectorized
cooperative fetches, a cross-thread rfactor, thread extents larger than the axis) lowered and run
by the loop-IR interpreter, and by the CUDA emulator where available, vs numpy."""

from __future__ import annotations

import numpy as np
import pytest
from lower_schedules_helpers import _check_conv, _conv, _rand, check_matmul, execute, matmul

import templtune
from templtune import te
from templtune.lower.ir import For, ForKind, Load, Ramp, Store
from templtune.te.functor import post_order


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
