"""Hand-scheduled operators lowered and run by the loop-IR interpreter vs numpy: conv2d and
depthwise conv2d CPU schedules, topi softmax / pool / dense, a masked and a multi-value (argmax)
reduction, and the lowering time of a large conv2d schedule."""

from __future__ import annotations

import numpy as np
import pytest
from lower_schedules_helpers import _check_conv, _conv, _rand, execute

import templtune
from templtune import te, topi
from templtune.topi.testing import conv2d_nchw_python


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
