"""Winograd: generated transform matrices are exact, and the conv2d computes a convolution."""

from __future__ import annotations

import numpy as np
import pytest

from templtune import te, topi
from templtune.te.evaluate import evaluate
from templtune.topi import testing as ref
from templtune.topi.nn.winograd import interpolation_points, winograd_transform_matrices

RNG = np.random.default_rng(1)


@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (3, 2), (6, 3), (2, 5)])
def test_matrices_give_exact_1d_correlation(m, r):
    A, B, G = winograd_transform_matrices(m, r, "float64")
    n = m + r - 1
    assert A.shape == (n, m) and B.shape == (n, n) and G.shape == (n, r)
    for _ in range(5):
        d = RNG.standard_normal(n)
        g = RNG.standard_normal(r)
        y = A.T @ ((G @ g) * (B.T @ d))
        want = np.array([sum(d[i + k] * g[k] for k in range(r)) for i in range(m)])
        np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)


def test_f23_matrices_are_small_integers_and_halves():
    A, B, G = winograd_transform_matrices(2, 3, "float64")
    assert set(np.unique(np.abs(B))) <= {0.0, 1.0}
    assert set(np.unique(np.abs(A))) <= {0.0, 1.0}
    assert set(np.unique(np.abs(G))) <= {0.0, 0.5, 1.0}


def test_matrices_are_exact_on_integer_basis():
    """The identity holds for every basis pair (d = e_i, g = e_k), i.e. as a bilinear map."""
    for m in (2, 4):
        A, B, G = winograd_transform_matrices(m, 3, "float64")
        n = m + 2
        for i in range(n):
            for k in range(3):
                d, g = np.eye(n)[i], np.eye(3)[k]
                y = A.T @ ((G @ g) * (B.T @ d))
                want = np.zeros(m)
                if 0 <= i - k < m:
                    want[i - k] = 1.0
                np.testing.assert_allclose(y, want, atol=1e-12)


def test_points_order():
    assert [str(p) for p in interpolation_points(7)] == ["0", "1", "-1", "2", "-2", "1/2",
                                                          "-1/2"]


@pytest.mark.parametrize(
    "shape, co, padding, tile",
    [((1, 3, 8, 8), 4, 1, 2), ((2, 2, 7, 9), 3, 1, 4), ((1, 2, 6, 5), 2, 0, 2),
     ((1, 1, 10, 10), 2, (1, 0, 2, 1), 4)],
)
def test_conv2d_winograd_nchw(shape, co, padding, tile):
    data = te.placeholder(shape, name="data")
    kernel = te.placeholder((co, shape[1], 3, 3), name="kernel")
    out = topi.nn.conv2d_winograd_nchw(data, kernel, padding, tile_size=tile)
    assert out.op.name == "output" and out.op.tag == "conv2d_nchw_winograd"
    names = set()
    stack = [out]
    while stack:
        t = stack.pop()
        names.add(t.op.name)
        stack.extend(t.op.input_tensors)
    assert {"kernel_pack", "data_pack", "bgemm", "inverse", "output", "data_pad", "d", "A",
            "B", "G"} <= names
    a = RNG.uniform(-1, 1, shape).astype("float32")
    w = RNG.uniform(-1, 1, (co, shape[1], 3, 3)).astype("float32")
    got, = evaluate(out, {data: a, kernel: w})
    want = ref.winograd_python(a, w, 1, padding)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_pre_transformed_kernel():
    data = te.placeholder((1, 2, 6, 6), name="data")
    kernel = te.placeholder((3, 2, 3, 3), name="kernel")
    kt = topi.nn.conv2d_winograd_weight_transform(kernel, 2)
    a = RNG.uniform(-1, 1, (1, 2, 6, 6)).astype("float32")
    w = RNG.uniform(-1, 1, (3, 2, 3, 3)).astype("float32")
    kp, = evaluate(kt, {kernel: w})
    assert kp.shape == (4, 4, 2, 3)
    packed = te.placeholder(kp.shape, name="packed")
    out = topi.nn.conv2d_winograd_nchw(data, packed, 1, tile_size=2, pre_transformed=True)
    got, = evaluate(out, {data: a, packed: kp})
    np.testing.assert_allclose(got, ref.conv2d_nchw_python(a, w, 1, 1), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("shape, co, padding, tile", [((1, 8, 8, 3), 4, 1, 2),
                                                      ((2, 7, 9, 2), 3, 1, 4)])
def test_conv2d_winograd_nhwc(shape, co, padding, tile):
    data = te.placeholder(shape, name="data")
    weight = te.placeholder((3, 3, shape[3], co), name="weight")
    out = topi.nn.conv2d_winograd_nhwc(data, weight, padding, tile_size=tile)
    assert out.op.name == "conv2d_winograd" and out.op.tag == "conv2d_winograd_nhwc"
    a = RNG.uniform(-1, 1, shape).astype("float32")
    w = RNG.uniform(-1, 1, (3, 3, shape[3], co)).astype("float32")
    got, = evaluate(out, {data: a, weight: w})
    np.testing.assert_allclose(got, ref.conv2d_nhwc_python(a, w, 1, padding), rtol=1e-3,
                               atol=1e-4)
