"""Property tests: random legal primitive sequences on matmul, conv2d NCHW/NHWC and depthwise
conv2d (padding, stride) always compute what numpy computes (via the loop-IR interpreter)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import te, topi
from templtune.lower.interp import run
from templtune.te.expr import IterKind
from templtune.topi.testing import (
    conv2d_nchw_python,
    conv2d_nhwc_python,
    depthwise_conv2d_python_nchw,
)

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _ext(iv) -> int:
    return int(iv.dom.extent)


def random_loop_transforms(data, stage, n_steps: int) -> None:
    """Random split / fuse / reorder on one stage."""
    for _ in range(n_steps):
        leaves = stage.leaf_iter_vars
        kind = data.draw(st.sampled_from(["split", "split", "nparts", "fuse", "reorder"]))
        if kind in ("split", "nparts"):
            iv = data.draw(st.sampled_from(leaves))
            n = data.draw(st.integers(1, max(1, _ext(iv)) + 1))
            if kind == "split":
                stage.split(iv, factor=n)
            else:
                stage.split(iv, nparts=n)
        elif kind == "fuse" and len(leaves) > 1:
            p = data.draw(st.integers(0, len(leaves) - 2))
            a, b = leaves[p], leaves[p + 1]
            if (a.iter_type is IterKind.REDUCE) == (b.iter_type is IterKind.REDUCE):
                stage.fuse(a, b)
        elif kind == "reorder":
            perm = data.draw(st.permutations(leaves))
            stage.reorder(*perm)


def random_annotations(data, stage) -> None:
    leaves = stage.leaf_iter_vars
    data_leaves = [v for v in leaves if v.iter_type is not IterKind.REDUCE]
    if data_leaves and data.draw(st.booleans()):
        stage.vectorize(data_leaves[-1] if data.draw(st.booleans())
                        else data.draw(st.sampled_from(data_leaves)))
    if data.draw(st.booleans()):
        stage.unroll(data.draw(st.sampled_from(leaves)))
    if data_leaves and data.draw(st.booleans()):
        iv = data_leaves[0]
        a = stage.iter_var_attrs.get(iv)
        if a is None or a.kind is None:
            stage.parallel(iv)
    if data.draw(st.booleans()):
        stage.pragma(leaves[0], "auto_unroll_max_step", data.draw(st.sampled_from([4, 16, 64])))
        stage.pragma(leaves[0], "unroll_explicit", data.draw(st.booleans()))


def schedule_reduction(data, s, out, producers) -> None:
    """Random schedule for a reduction ``out`` whose input stages ``producers`` may be placed
    anywhere legal."""
    consumer = s[out]
    cache = None
    if data.draw(st.booleans()):
        cache = s.cache_write(out, data.draw(st.sampled_from(["local", "global"])))
    random_loop_transforms(data, s[out], data.draw(st.integers(0, 4)))
    if cache is not None:
        random_loop_transforms(data, s[cache], data.draw(st.integers(0, 4)))
        random_annotations(data, s[cache])
    random_annotations(data, s[out])
    attach_pos = len(consumer.leaf_iter_vars) - 1
    if cache is not None:
        attach_pos = data.draw(st.integers(0, len(consumer.leaf_iter_vars) - 1))
        s[cache].compute_at(consumer, consumer.leaf_iter_vars[attach_pos])
    reader = s[cache] if cache is not None else consumer
    for p in producers:
        choice = data.draw(st.sampled_from(["inline", "root", "at_reader", "at_out"]))
        if choice == "inline":
            s[p].compute_inline()
        elif choice == "at_reader":
            s[p].compute_at(reader, data.draw(st.sampled_from(reader.leaf_iter_vars)))
        elif choice == "at_out":
            pos = data.draw(st.integers(0, attach_pos))
            s[p].compute_at(consumer, consumer.leaf_iter_vars[pos])


def _rand(rng, shape):
    return rng.random(shape).astype("float32")


def _run(s, args, inputs, expect):
    f = templtune.lower(s, args)
    out = np.zeros(expect.shape, "float32")
    run(f, *inputs, out)
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)


@SETTINGS
@given(data=st.data(), n=st.integers(1, 6), m=st.integers(1, 7), k=st.integers(1, 6))
def test_matmul_random_schedules(data, n, m, k):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    readers = []
    if data.draw(st.booleans()):
        readers.append(s.cache_read(A, "local", [C]))
    schedule_reduction(data, s, C, readers)
    rng = np.random.default_rng(0)
    a, b = _rand(rng, (n, k)), _rand(rng, (k, m))
    _run(s, [A, B, C], [a, b], a @ b)


@SETTINGS
@given(data=st.data(), stride=st.sampled_from([1, 2]), pad=st.sampled_from([0, 1, 2]),
       hw=st.integers(3, 6), layout=st.sampled_from(["NCHW", "NHWC"]))
def test_conv2d_random_schedules(data, stride, pad, hw, layout):
    ci, co, kk = 2, 3, 3
    if hw + 2 * pad < kk:
        pad = 1
    rng = np.random.default_rng(1)
    if layout == "NCHW":
        X = te.placeholder((1, ci, hw, hw), name="data")
        W = te.placeholder((co, ci, kk, kk), name="kernel")
        out = topi.nn.conv2d_nchw(X, W, stride, pad, dilation=1, out_dtype="float32")
        x, w = _rand(rng, (1, ci, hw, hw)), _rand(rng, (co, ci, kk, kk))
        ref = conv2d_nchw_python(x, w, stride, pad)
    else:
        X = te.placeholder((1, hw, hw, ci), name="data")
        W = te.placeholder((kk, kk, ci, co), name="kernel")
        out = topi.nn.conv2d_nhwc(X, W, stride, pad, dilation=1, out_dtype="float32")
        x, w = _rand(rng, (1, hw, hw, ci)), _rand(rng, (kk, kk, ci, co))
        ref = conv2d_nhwc_python(x, w, stride, pad)
    s = te.create_schedule(out.op)
    padt = out.op.input_tensors[0]
    schedule_reduction(data, s, out, [padt])
    _run(s, [X, W, out], [x, w], ref)


@SETTINGS
@given(data=st.data(), stride=st.sampled_from([1, 2]), pad=st.sampled_from([0, 1]))
def test_depthwise_random_schedules(data, stride, pad):
    X = te.placeholder((1, 2, 5, 5), name="data")
    W = te.placeholder((2, 1, 3, 3), name="kernel")
    out = topi.nn.depthwise_conv2d_nchw(X, W, stride, pad, dilation=1, out_dtype="float32")
    s = te.create_schedule(out.op)
    schedule_reduction(data, s, out, [out.op.input_tensors[0]])
    rng = np.random.default_rng(2)
    x, w = _rand(rng, (1, 2, 5, 5)), _rand(rng, (2, 1, 3, 3))
    ref = depthwise_conv2d_python_nchw(x, w, stride, pad)
    _run(s, [X, W, out], [x, w], ref)


@SETTINGS
@given(data=st.data())
def test_rfactor_random(data):
    A = te.placeholder((3, 11), name="A")
    r = te.reduce_axis((0, 11), name="k")
    B = te.compute((3,), lambda i: te.sum(A[i, r] * 2.0, axis=r), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(r, factor=data.draw(st.integers(1, 12)))
    rf = s.rfactor(B, data.draw(st.sampled_from([ko, ki])),
                   factor_axis=data.draw(st.integers(0, 1)))
    random_loop_transforms(data, s[rf], data.draw(st.integers(0, 3)))
    random_annotations(data, s[rf])
    if data.draw(st.booleans()):
        s[rf].compute_at(s[B], s[B].leaf_iter_vars[0])
    a = np.random.default_rng(3).random((3, 11)).astype("float32")
    _run(s, [A, B], [a], 2 * a.sum(1))


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), n=st.integers(2, 12), m=st.integers(2, 12), k=st.integers(1, 9))
def test_gpu_style_random_tiling(data, n, m, k):
    """Block/thread binding, shared + local caches with cooperative fetch; checked serially and,
    when the CUDA emulator is present, under GPU semantics with race detection."""
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    ty_n, tx_n = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    bi, i = s[C].split(i, factor=data.draw(st.integers(1, 6)))
    ti, ii = s[C].split(i, nparts=ty_n)
    bj, j = s[C].split(j, factor=data.draw(st.integers(1, 6)))
    tj, jj = s[C].split(j, nparts=tx_n)
    s[C].reorder(bi, bj, ti, tj, ii, jj)
    ty, tx = te.thread_axis("threadIdx.y"), te.thread_axis("threadIdx.x")
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, ty)
    s[C].bind(tj, tx)
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=data.draw(st.integers(1, 4)))
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    if data.draw(st.booleans()):
        s[CL].unroll(ki)
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        fused = s[X].fuse(*s[X].op.axis)
        a1, fused = s[X].split(fused, nparts=ty_n)
        a2, fused = s[X].split(fused, nparts=tx_n)
        s[X].bind(a1, ty)
        s[X].bind(a2, tx)
    rng = np.random.default_rng(4)
    a, b = _rand(rng, (n, k)), _rand(rng, (k, m))
    f = templtune.lower(s, [A, B, C])
    out = np.zeros((n, m), "float32")
    run(f, a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
    try:
        from templtune.runtime.cuda.emulate import emulate
    except ImportError:  # pragma: no cover - CUDA backend not present
        return
    out2 = np.zeros((n, m), "float32")
    emulate(f, a, b, out2)
    np.testing.assert_allclose(out2, a @ b, rtol=1e-4, atol=1e-5)
