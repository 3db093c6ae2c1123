"""Every topi operator, evaluated with te.evaluate, matches its numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune import te, topi
from templtune.errors import ExprError
from templtune.te.evaluate import evaluate
from templtune.topi import testing as ref
from templtune.topi.utils import get_const_int, get_const_tuple

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


@pytest.mark.parametrize(
    "shape, kshape, stride, padding, dilation",
    [
        ((1, 3, 8, 8), (4, 3, 3, 3), 1, 1, 1),
        ((2, 4, 9, 7), (5, 4, 3, 3), 2, 1, 1),
        ((1, 2, 10, 10), (3, 2, 3, 3), 1, 2, 2),
        ((1, 3, 7, 9), (2, 3, 1, 1), 1, 0, 1),
        ((1, 2, 8, 8), (2, 2, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2)),
        ((1, 2, 6, 6), (2, 2, 3, 3), 1, "SAME", 1),
    ],
)
def test_conv2d_nchw(shape, kshape, stride, padding, dilation):
    data = te.placeholder(shape, name="data")
    kernel = te.placeholder(kshape, name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation, out_dtype="float32")
    assert out.op.name == "conv2d_nchw" and out.op.tag == "conv2d_nchw"
    assert [iv.var.name for iv in out.op.axis] == ["nn", "ff", "yy", "xx"]
    assert [iv.var.name for iv in out.op.reduce_axis] == ["rc", "ry", "rx"]
    assert out.op.input_tensors[0].op.name == "pad_temp"
    a, w = rand(*shape), rand(*kshape)
    got, = evaluate([out], {data: a, kernel: w})
    want = ref.conv2d_nchw_python(a, w, stride, padding, dilation=dilation)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stride, padding, dilation", [(1, 1, 1), (2, 0, 1), (1, 2, 2)])
def test_conv2d_nhwc(stride, padding, dilation):
    data = te.placeholder((2, 9, 8, 3), name="data")
    kernel = te.placeholder((3, 3, 3, 4), name="kernel")
    out = topi.nn.conv2d_nhwc(data, kernel, stride, padding, dilation)
    assert out.op.name == "Conv2dOutput"
    a, w = rand(2, 9, 8, 3), rand(3, 3, 3, 4)
    got, = evaluate(out, {data: a, kernel: w})
    np.testing.assert_allclose(got, ref.conv2d_nhwc_python(a, w, stride, padding, dilation=dilation),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mult, stride, padding", [(1, 1, 1), (2, 2, 1), (1, 1, "VALID")])
def test_depthwise_conv2d(mult, stride, padding):
    data = te.placeholder((1, 3, 9, 9), name="data")
    kernel = te.placeholder((3, mult, 3, 3), name="kernel")
    out = topi.nn.depthwise_conv2d_nchw(data, kernel, stride, padding)
    a, w = rand(1, 3, 9, 9), rand(3, mult, 3, 3)
    got, = evaluate(out, {data: a, kernel: w})
    np.testing.assert_allclose(got, ref.depthwise_conv2d_python_nchw(a, w, stride, padding),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_bias", [False, True])
def test_dense(with_bias):
    data = te.placeholder((3, 10), name="data")
    weight = te.placeholder((7, 10), name="weight")
    bias = te.placeholder((7,), name="bias") if with_bias else None
    out = topi.nn.dense(data, weight, bias)
    dense_op = out.op if not with_bias else out.op.input_tensors[0].op
    assert dense_op.name == "T_dense" and dense_op.tag == "dense"
    a, w, b = rand(3, 10), rand(7, 10), rand(7)
    inputs = {data: a, weight: w}
    if with_bias:
        inputs[bias] = b
    got, = evaluate(out, inputs)
    np.testing.assert_allclose(got, ref.dense_python(a, w, b if with_bias else None),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kernel, stride, padding, pool_type, ceil_mode, count_include_pad, layout",
    [
        (2, 2, 0, "max", False, True, "NCHW"),
        (3, 2, 1, "max", False, True, "NCHW"),
        (3, 1, 1, "avg", False, True, "NCHW"),
        (3, 2, 1, "avg", False, False, "NCHW"),
        (3, 2, 0, "max", True, True, "NCHW"),
        (2, 2, (0, 0, 1, 1), "avg", False, False, "NHWC"),
    ],
)
def test_pool2d(kernel, stride, padding, pool_type, ceil_mode, count_include_pad, layout):
    shape = (2, 3, 7, 8) if layout == "NCHW" else (2, 7, 8, 3)
    data = te.placeholder(shape, name="data")
    out = topi.nn.pool2d(data, kernel, stride, padding, pool_type, layout=layout,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    assert out.op.tag == f"pool_{pool_type}"
    a = rand(*shape)
    got, = evaluate(out, {data: a})
    want = ref.pool2d_python(a, kernel, stride, padding, pool_type, ceil_mode,
                             count_include_pad, layout)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, axis", [((2, 10), -1), ((3, 4, 5), 1), ((6,), 0)])
def test_softmax(shape, axis):
    x = te.placeholder(shape, name="x")
    out = topi.nn.softmax(x, axis)
    assert out.op.name == "T_softmax_norm"
    a = rand(*shape) * 5
    got, = evaluate(out, {x: a})
    np.testing.assert_allclose(got, ref.softmax_python(a, axis), rtol=1e-5, atol=1e-6)


def test_relu_bias_add_and_broadcast():
    x = te.placeholder((2, 3, 4, 4), name="x")
    b = te.placeholder((3,), name="b")
    c = te.placeholder((1, 3, 1, 1), name="c")
    relu = topi.nn.relu(x)
    assert relu.op.name == "compute" and relu.op.tag == "elemwise"
    assert [iv.var.name for iv in relu.op.axis] == ["i0", "i1", "i2", "i3"]
    ba = topi.nn.bias_add(x, b, axis=1)
    add = topi.add(x, c)
    assert add.op.name == "T_add" and [iv.var.name for iv in add.op.axis][0] == "ax0"
    mul = topi.multiply(c, x)
    scal = topi.multiply(x, 2.0)
    a, bb, cc = rand(2, 3, 4, 4), rand(3), rand(1, 3, 1, 1)
    r, s, t, u, v = evaluate([relu, ba, add, mul, scal], {x: a, b: bb, c: cc})
    np.testing.assert_allclose(r, np.maximum(a, 0))
    np.testing.assert_allclose(s, a + bb[None, :, None, None], rtol=1e-6)
    np.testing.assert_allclose(t, a + cc, rtol=1e-6)
    np.testing.assert_allclose(u, a * cc, rtol=1e-6)
    np.testing.assert_allclose(v, a * 2, rtol=1e-6)


def test_broadcast_rank_mismatch_and_error():
    x = te.placeholder((4, 5), name="x")
    y = te.placeholder((5,), name="y")
    out = topi.subtract(x, y)
    a, b = rand(4, 5), rand(5)
    np.testing.assert_allclose(evaluate(out, {x: a, y: b})[0], a - b, rtol=1e-6)
    with pytest.raises(ExprError, match="broadcast"):
        topi.add(x, te.placeholder((3,), name="z"))


def test_pad_names_and_values():
    x = te.placeholder((2, 3), name="x")
    p = topi.nn.pad(x, (1, 0), (2, 1), pad_value=-1.0)
    assert p.op.name == "PadInput" and get_const_tuple(p.shape) == (5, 4)
    a = rand(2, 3)
    got, = evaluate(p, {x: a})
    np.testing.assert_allclose(got, np.pad(a, ((1, 2), (0, 1)), constant_values=-1.0))


def test_utils():
    assert get_const_int(te.const(5)) == 5
    n = te.var("n")
    assert get_const_tuple((2, te.const(3), n))[:2] == (2, 3)
    with pytest.raises(ExprError):
        get_const_int(n)


# ------------------------------------------------------------------ property tests + oracles

def _naive_conv(a, w, stride, pads, dilation):
    """Direct 7-loop convolution: the oracle of the oracle."""
    n, c, h, wd = a.shape
    o, _, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = stride, dilation, pads
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for b in range(n):
        for f in range(o):
            for y in range(oh):
                for x in range(ow):
                    acc = 0.0
                    for ch in range(c):
                        for ky in range(kh):
                            for kx in range(kw):
                                iy, ix = y * sh + ky * dh - pt, x * sw + kx * dw - pl
                                if 0 <= iy < h and 0 <= ix < wd:
                                    acc += a[b, ch, iy, ix] * w[f, ch, ky, kx]
                    out[b, f, y, x] = acc
    return out


def test_reference_conv_matches_naive_loops():
    a, w = rand(1, 2, 6, 7), rand(3, 2, 3, 2)
    got = ref.conv2d_nchw_python(a, w, (2, 1), (1, 0, 2, 1), dilation=(1, 2))
    np.testing.assert_allclose(got, _naive_conv(a, w, (2, 1), (1, 0, 2, 1), (1, 2)),
                               rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(h=st.integers(3, 9), w=st.integers(3, 9), k=st.integers(1, 3), s=st.integers(1, 3),
           d=st.integers(1, 2), p=st.tuples(*[st.integers(0, 2)] * 4), seed=st.integers(0, 99))
def test_conv2d_nchw_random_params(h, w, k, s, d, p, seed):
    if h + p[0] + p[2] < (k - 1) * d + 1 or w + p[1] + p[3] < (k - 1) * d + 1:
        return
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (1, 2, h, w)).astype("float32")
    f = rng.uniform(-1, 1, (2, 2, k, k)).astype("float32")
    data = te.placeholder(a.shape, name="data")
    kernel = te.placeholder(f.shape, name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, s, p, d)
    got, = evaluate(out, {data: a, kernel: f})
    np.testing.assert_allclose(got, _naive_conv(a, f, (s, s), p, (d, d)), rtol=1e-4, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(h=st.integers(2, 9), k=st.integers(1, 3), s=st.integers(1, 3), p=st.integers(0, 1),
           pool=st.sampled_from(["max", "avg"]), cip=st.booleans(), ceil=st.booleans())
def test_pool2d_random_params(h, k, s, p, pool, cip, ceil):
    if p >= k or h + 2 * p < k:
        return
    a = rand(1, 2, h, h + 1)
    data = te.placeholder(a.shape, name="data")
    out = topi.nn.pool2d(data, k, s, p, pool, ceil_mode=ceil, count_include_pad=cip)
    got, = evaluate(out, {data: a})
    want = ref.pool2d_python(a, k, s, p, pool, ceil, cip)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out_size, pool, layout", [((1, 1), "avg", "NCHW"), ((3, 2), "max", "NCHW"),
                                                    ((2, 3), "avg", "NHWC"), (4, "max", "NCHW")])
def test_adaptive_and_global_pool(out_size, pool, layout):
    shape = (2, 3, 7, 5) if layout == "NCHW" else (2, 7, 5, 3)
    data = te.placeholder(shape, name="data")
    out = topi.nn.adaptive_pool2d(data, out_size, pool, layout)
    a = rand(*shape)
    got, = evaluate(out, {data: a})
    np.testing.assert_allclose(got, ref.adaptive_pool2d_python(a, out_size, pool, layout),
                               rtol=1e-5, atol=1e-6)
    g = topi.nn.global_pool2d(data, pool, layout)
    got_g, = evaluate(g, {data: a})
    np.testing.assert_allclose(got_g, ref.adaptive_pool2d_python(a, 1, pool, layout),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bx, by", [(3, 3), (1, 3), (3, 1)])
def test_batch_matmul_and_flatten(bx, by):
    x = te.placeholder((bx, 4, 5), name="x")
    y = te.placeholder((by, 6, 5), name="y")
    out = topi.nn.batch_matmul(x, y)
    flat = topi.nn.batch_flatten(x)
    a, b = rand(bx, 4, 5), rand(by, 6, 5)
    got, f = evaluate([out, flat], {x: a, y: b})
    np.testing.assert_allclose(got, ref.batch_matmul_python(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(f, a.reshape(bx, -1))


def test_transpose_reshape_unary():
    x = te.placeholder((2, 3, 4), name="x")
    a = rand(2, 3, 4)
    t, r, e = evaluate([topi.transpose(x, (2, 0, 1)), topi.reshape(x, (4, 6)), topi.exp(x)],
                       {x: a})
    np.testing.assert_array_equal(t, a.transpose(2, 0, 1))
    np.testing.assert_array_equal(r, a.reshape(4, 6))
    np.testing.assert_allclose(e, np.exp(a), rtol=1e-6)


@pytest.mark.parametrize("groups, stride, padding", [(2, 1, 1), (4, 2, 0), (1, 1, 1)])
def test_group_conv2d(groups, stride, padding):
    data = te.placeholder((1, 4, 7, 7), name="data")
    kernel = te.placeholder((8, 4 // groups, 3, 3), name="kernel")
    out = topi.nn.group_conv2d_nchw(data, kernel, stride, padding, 1, groups)
    a, w = rand(1, 4, 7, 7), rand(8, 4 // groups, 3, 3)
    got, = evaluate(out, {data: a, kernel: w})
    np.testing.assert_allclose(got, ref.conv2d_nchw_python(a, w, stride, padding,
                                                           groups=groups), rtol=1e-4, atol=1e-5)
    with pytest.raises(ExprError, match="groups"):
        topi.nn.group_conv2d_nchw(data, kernel, 1, 1, 1, 3)


@settings(max_examples=80, deadline=None)
@given(dims=st.lists(st.integers(1, 4), min_size=1, max_size=5), data=st.data())
def test_reshape_matches_numpy_for_any_regrouping(dims, data) -> None:
    """Reshapes between any two shapes of the same size (unit axes added, dropped and moved,
    runs of axes merged and split) read the elements numpy's row-major reshape does; the
    compiled kernel (vectorized innermost loop) agrees with the interpreter."""
    import templtune

    size = int(np.prod(dims))
    new: list[int] = []
    rest = size
    while rest > 1:
        d = data.draw(st.sampled_from([k for k in range(2, rest + 1) if rest % k == 0]))
        new.append(d)
        rest //= d
    for _ in range(data.draw(st.integers(0, 2))):
        new.insert(data.draw(st.integers(0, len(new))), 1)
    new = new or [1]
    x = te.placeholder(tuple(dims), name="x")
    y = topi.reshape(x, new)
    a = np.arange(size, dtype="float32").reshape(dims)
    (got,) = evaluate([y], {x: a})
    np.testing.assert_array_equal(got, a.reshape(new))
    s = te.create_schedule(y.op)
    if new[-1] > 1:
        s[y].vectorize(s[y].op.axis[-1])
    f = templtune.build(s, [x, y], "llvm")
    out = templtune.nd.array(np.zeros(new, "float32"))
    f(templtune.nd.array(a), out)
    np.testing.assert_array_equal(out.numpy(), a.reshape(new))
