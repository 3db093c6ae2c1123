"""Default schedules of groups without a template or record (graph/default_schedules.py).

Oracles: numpy and topi.testing's references, on shapes whose innermost extents divide the
vector lanes, divide only a narrower power of two, or nothing (tails); plus the lowered loop IR
(vector ``ramp`` accesses, ``parallel`` loops) and networks built by ``graph.build`` against the
graph's numpy interpreter.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import templtune
from templtune import graph, te, topi
from templtune.graph import nn
from templtune.graph.default_schedules import default_schedule
from templtune.lower.ir import Buffer, For, ForKind, Load, Ramp, Store
from templtune.lower.vectorize import vectorize_loops
from templtune.target import Target
from templtune.te.expr import IntImm, Select, Var, const
from templtune.topi.testing import adaptive_pool2d_python, pool2d_python, softmax_python

TARGET = Target("llvm")
LANES = TARGET.capabilities.lanes("float32")


def _run(tensors: list[te.Tensor], *arrays: np.ndarray) -> np.ndarray:
    """Build the default schedule of ``tensors`` (inputs, then the output) and run it."""
    out = tensors[-1]
    f = templtune.build(default_schedule(tensors, TARGET), tensors, target=TARGET)
    res = np.zeros(tuple(int(d) for d in out.shape), out.dtype)
    f(*arrays, res)
    return res


def _ir(tensors: list[te.Tensor]) -> str:
    return str(templtune.lower(default_schedule(tensors, TARGET), tensors, simple_mode=True))


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


POOLS = [  # (shape NCHW, kernel, stride, padding, ceil_mode)
    ((1, 8, 24, 24), 3, 2, 1, False),    # output W 12: 4-lane vectors (a lane fraction)
    ((1, 4, 35, 35), 3, 2, 1, False),    # output W 18: no power of two >= 4 divides it
    ((2, 3, 17, 13), 2, 2, 0, True),     # ceil mode, odd sizes, batch 2
    ((1, 5, 66, 66), 3, 1, 1, False),    # output W 66: 2 x 33, serial tail-free fallback
    ((1, 16, 32, 64), 3, 1, 1, False),   # output W 64: full-width vectors
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("case", POOLS, ids=lambda c: "x".join(map(str, c[0])))
def test_pool2d_matches_numpy(case: tuple, pool_type: str, layout: str) -> None:
    shape, k, s, p, ceil = case
    a = _rand(*shape)
    if layout == "NHWC":
        a = np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    x = te.placeholder(a.shape, name="x")
    for include_pad in ([True, False] if pool_type == "avg" else [True]):
        y = topi.nn.pool2d(x, k, s, p, pool_type, layout=layout, ceil_mode=ceil,
                           count_include_pad=include_pad)
        want = pool2d_python(a, k, s, p, pool_type, ceil_mode=ceil,
                             count_include_pad=include_pad, layout=layout)
        np.testing.assert_allclose(_run([x, y], a), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("shape", [(1, 64, 7, 7), (1, 5, 9, 3), (2, 20, 4, 4)])
def test_global_and_adaptive_pool_match_numpy(shape: tuple, pool_type: str, layout: str) -> None:
    a = _rand(*shape)
    if layout == "NHWC":
        a = np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    x = te.placeholder(a.shape, name="x")
    y = topi.nn.global_pool2d(x, pool_type, layout)
    want = adaptive_pool2d_python(a, 1, pool_type, layout)
    np.testing.assert_allclose(_run([x, y], a), want, rtol=1e-5, atol=1e-6)
    y = topi.nn.adaptive_pool2d(x, (2, 3), pool_type, layout)
    want = adaptive_pool2d_python(a, (2, 3), pool_type, layout)
    np.testing.assert_allclose(_run([x, y], a), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("shape,layout", [((1, 15, 28, 28, 8), "NCHW8c"),
                                          ((1, 3, 9, 5, 16), "NCHW16c"),
                                          ((1, 7, 7, 96), "NHWC"), ((1, 40, 6, 6), "NCHW")])
def test_global_pool_accumulates_independent_vectors(shape: tuple, layout: str,
                                                     pool_type: str) -> None:
    """Global pooling (every window whole: no bounds test) accumulates a block of
    independent vectors inside its reduction, unrolled; the result is numpy's."""
    from templtune.schedule.relations import IterKind

    a = _rand(*shape)
    x = te.placeholder(shape, name="x")
    y = topi.nn.global_pool2d(x, pool_type, layout)
    op = y.op if y.op.reduce_axis else y.op.input_tensors[0].op  # avg: the sum, then / n
    cond = op.body[0].condition
    assert isinstance(cond, IntImm) and cond.value == 1  # no bounds test
    s = default_schedule([x, y], TARGET)
    st = s[op.output(0)]
    kinds = [getattr(st.iter_var_attrs.get(iv), "kind", None) for iv in st.leaf_iter_vars]
    names = [iv.var.name for iv in st.leaf_iter_vars]
    assert kinds[-2:] == [IterKind.UNROLLED, IterKind.VECTORIZED], (names, kinds)
    assert names[-3].startswith("rv"), names
    hw = (1, 2) if layout == "NHWC" else (2, 3)
    want = (a.max if pool_type == "max" else a.mean)(axis=hw, keepdims=True)
    np.testing.assert_allclose(_run([x, y], a), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1000), (3, 1000), (2, 7), (1, 64), (4, 5, 123),
                                   (1, 4100)])
def test_softmax_last_axis_matches_numpy(shape: tuple) -> None:
    a = _rand(*shape) * 4
    x = te.placeholder(shape, name="x")
    y = topi.nn.softmax(x, axis=-1)
    np.testing.assert_allclose(_run([x, y], a), softmax_python(a, axis=-1), rtol=1e-5,
                               atol=1e-7)


def test_softmax_inner_axis_matches_numpy() -> None:
    a = _rand(2, 100, 12)
    x = te.placeholder(a.shape, name="x")
    y = topi.nn.softmax(x, axis=1)
    np.testing.assert_allclose(_run([x, y], a), softmax_python(a, axis=1), rtol=1e-5, atol=1e-7)


def _concat(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    ca = int(a.shape[1])
    return te.compute((a.shape[0], ca + int(b.shape[1]), a.shape[2], a.shape[3]),
                      lambda n, c, h, w: te.if_then_else(c < ca, a[n, c, h, w],
                                                         b[n, c - ca, h, w]), name="concat")


def _nchw8c(a: te.Tensor) -> te.Tensor:
    n, c, h, w = (int(d) for d in a.shape)
    return te.compute((n, c // 8, h, w, 8), lambda i, co, y, xx, ci: a[i, co * 8 + ci, y, xx],
                      name="layout_transform")


INJECTIVE: list[tuple[str, Callable[..., te.Tensor], Callable[..., np.ndarray], int]] = [
    ("add_relu", lambda a, b: topi.nn.relu(topi.add(a, b)),
     lambda a, b: np.maximum(a + b, 0), 2),
    ("multiply_clip", lambda a, b: te.compute(a.shape, lambda *i: te.min(te.max(
        topi.multiply(a, b)[i], te.const(0.0, "float32")), te.const(6.0, "float32"))),
     lambda a, b: np.clip(a * b, 0, 6), 2),
    ("concatenate", _concat, lambda a, b: np.concatenate([a, b], axis=1), 2),
    ("pad", lambda a: topi.nn.pad(a, (0, 0, 1, 2), (0, 1, 2, 1), 0.5),
     lambda a: np.pad(a, ((0, 0), (0, 1), (1, 2), (2, 1)), constant_values=0.5), 1),
    ("transpose_nhwc", lambda a: topi.transpose(a, (0, 2, 3, 1)),
     lambda a: a.transpose(0, 2, 3, 1), 1),
    ("layout_nchw8c", _nchw8c,
     lambda a: a.reshape(a.shape[0], a.shape[1] // 8, 8, *a.shape[2:]).transpose(0, 1, 3, 4, 2),
     1),
]


@pytest.mark.parametrize("shape", [(1, 16, 28, 28), (2, 8, 5, 7), (1, 24, 3, 64)])
@pytest.mark.parametrize("case", INJECTIVE, ids=lambda c: c[0])
def test_injective_matches_numpy(case: tuple, shape: tuple) -> None:
    _, make, ref, n_in = case
    arrays = [_rand(*shape, seed=k) for k in range(n_in)]
    xs = [te.placeholder(shape, name=f"x{k}") for k in range(n_in)]
    y = make(*xs)
    np.testing.assert_allclose(_run([*xs, y], *arrays), ref(*arrays), rtol=1e-6, atol=1e-7)


def test_bias_add_relu_matches_numpy() -> None:
    a, b = _rand(1, 12, 9, 20), _rand(12, seed=1)
    x, bias = te.placeholder(a.shape, name="x"), te.placeholder(b.shape, name="b")
    y = topi.nn.relu(topi.nn.bias_add(x, bias, axis=1))
    want = np.maximum(a + b[None, :, None, None], 0)
    np.testing.assert_allclose(_run([x, bias, y], a, b), want, rtol=1e-6)


def test_maxpool_is_vectorized_and_parallel() -> None:
    x = te.placeholder((1, 64, 112, 112), name="x")
    ir = _ir([x, topi.nn.pool2d(x, 3, 2, 1, "max")])
    assert '"parallel"' in ir
    vec = max(n for n in (LANES, LANES // 2, LANES // 4) if 56 % n == 0)
    assert "pool_max[ramp(" in ir and f", 1, {vec})] = max(" in ir  # vector accumulators


def test_softmax_stages_are_vectorized() -> None:
    x = te.placeholder((1, 1000), name="x")
    ir = _ir([x, topi.nn.softmax(x)])
    vec = max(n for n in (LANES, LANES // 2, LANES // 4) if 1000 % n == 0)
    for stage in ("T_softmax_maxelem.rf", "T_softmax_exp", "T_softmax_expsum.rf",
                  "T_softmax_norm"):
        assert f"{stage}[ramp(" in ir, stage
    assert ir.count("exp(") == 1  # exp is computed once per element, not once per reader
    assert f", 1, {vec})]" in ir


@pytest.mark.parametrize("n", [197, 577])
def test_softmax_over_prime_rows_is_vectorized_with_a_peeled_tail(n: int) -> None:
    """No lane count divides a prime row: full vectors run the row and lowering peels the
    partial last one (the max and sum partials too, through rfactor's likely() bound)."""
    x = te.placeholder((2, 3, n), name="x")
    ir = _ir([x, topi.nn.softmax(x)])
    for stage in ("T_softmax_maxelem.rf", "T_softmax_exp", "T_softmax_expsum.rf",
                  "T_softmax_norm"):
        assert f"{stage}[ramp(" in ir, stage
    assert f", 1, {LANES})]" in ir
    assert "@tir.likely" in ir
    a = _rand(2, 3, n) * 8
    np.testing.assert_allclose(_run([x, topi.nn.softmax(x)], a), softmax_python(a, axis=-1),
                               rtol=1e-5, atol=1e-7)


def test_elementwise_is_vectorized_and_parallel() -> None:
    a, b = te.placeholder((1, 64, 56, 56), name="a"), te.placeholder((1, 64, 56, 56), name="b")
    ir = _ir([a, b, topi.nn.relu(topi.add(a, b))])
    assert '"parallel"' in ir and "ramp(" in ir


def test_small_work_runs_on_one_thread() -> None:
    x = te.placeholder((8, 10), name="x")
    assert '"parallel"' not in _ir([x, topi.nn.softmax(x)])
    a = te.placeholder((1, 64, 56, 56), name="a")
    assert '"parallel"' in _ir([a, topi.nn.relu(a)])


def test_network_of_default_groups_matches_numpy() -> None:
    """Pooling, element-wise and softmax groups built by graph.build (all default schedules)."""
    data = nn.var("data", (1, 6, 19, 19))
    bias = nn.var("bias", (6,))
    x = nn.max_pool2d(data, (3, 3), (2, 2), (1, 1))
    x = nn.relu(nn.bias_add(x, bias))
    y = nn.avg_pool2d(data, (3, 3), (2, 2), (1, 1))
    x = nn.clip(nn.add(x, y), 0.0, 1.5)
    x = nn.batch_flatten(nn.global_avg_pool2d(x))
    net = graph.Function([data, bias], nn.softmax(x))
    params = {"bias": _rand(6, seed=2)}
    a = _rand(1, 6, 19, 19, seed=3)
    lib = graph.build(net, target="llvm", params=params)
    assert {cg.impl for cg in lib.groups} == {"default"}
    m = graph.GraphModule(lib["default"](templtune.cpu()))
    m.set_input("data", a)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(net, params, data=a),
                               rtol=1e-5, atol=1e-6)


def test_vectorizer_renders_guarded_select_over_static_buffers() -> None:
    """A lane-wise padding test (``if_then_else`` with a load) vectorizes when the loads read
    buffers of constant size (masked loads), and stays serial over a buffer of unknown size."""
    i, n = Var("i"), Var("n")
    for shape, kind in (((const(16),), ForKind.VECTORIZED), ((n,), ForKind.SERIAL)):
        a, b = Buffer("A", shape, "float32"), Buffer("B", (const(16),), "float32")
        val = Select(i >= 1, Load(a, i - 1), const(-1.0),
                     guarded=True)
        out = vectorize_loops(For(i, const(0), const(8), ForKind.VECTORIZED, Store(b, i, val)))
        if kind is ForKind.SERIAL:
            assert isinstance(out, For) and out.kind is ForKind.SERIAL
        else:
            assert isinstance(out, Store) and isinstance(out.value, Select)
            assert out.value.guarded and isinstance(out.value.true_value.index, Ramp)


def test_padded_window_runs_as_masked_vector_loads() -> None:
    x = te.placeholder((1, 4, 20, 32), name="x")
    y = topi.nn.pool2d(x, 3, 2, 1, "max")
    f = templtune.build(default_schedule([x, y], TARGET), [x, y], target=TARGET)
    assert "@llvm.masked." in f.get_source("ll")
    a = _rand(1, 4, 20, 32)
    out = np.zeros((1, 4, 10, 16), "float32")
    f(a, out)
    np.testing.assert_array_equal(out, pool2d_python(a, 3, 2, 1, "max"))


def _depthwise_nchwc(h: int, w: int, cb: int, block: int) -> list[te.Tensor]:
    """A 3x3 depthwise conv on NCHW{block}c data, pad 1 (the blocked op of mobilenet)."""
    data = te.placeholder((1, cb, h, w, block), name="data")
    kernel = te.placeholder((cb, 1, 3, 3, 1, block), name="kernel")
    pad = te.compute((1, cb, h + 2, w + 2, block), lambda n, c, y, x, v: te.if_then_else(
        te.all(y >= 1, y < h + 1, x >= 1, x < w + 1), data[n, c, y - 1, x - 1, v],
        const(0.0, "float32")), name="pad")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    out = te.compute((1, cb, h, w, block), lambda n, c, y, x, v: te.sum(
        pad[n, c, y + ry, x + rx, v] * kernel[c, 0, ry, rx, 0, v], axis=[ry, rx]), name="dw")
    return [data, kernel, out]


@pytest.mark.parametrize("h,w", [(7, 7), (14, 14), (5, 5), (6, 1), (9, 11)])
def test_short_window_reduction_gets_an_output_block(h: int, w: int) -> None:
    """A depthwise conv (9 taps) runs a block of neighbouring outputs inside its window,
    unrolled, each with its own accumulator chain; the result is numpy's."""
    from templtune.schedule.relations import IterKind

    cb, block = 2, 2 * LANES
    tensors = _depthwise_nchwc(h, w, cb, block)
    s = default_schedule(tensors, TARGET)
    st = s[tensors[-1]]
    leaves = [iv.var.name for iv in st.leaf_iter_vars]
    kinds = [getattr(st.iter_var_attrs.get(iv), "kind", None) for iv in st.leaf_iter_vars]
    expect = max((f for f in range(2, 9) if w % f == 0), default=None)
    if expect is None:  # w == 1: nothing to block
        assert leaves[-3:-1] == ["ry", "rx"]
    else:
        i = leaves.index("ry")
        assert leaves[i:i + 2] == ["ry", "rx"] and leaves[i + 2].startswith("x")
        xi = st.leaf_iter_vars[i + 2]
        assert int(xi.dom.extent.value) == expect and kinds[i + 2] == IterKind.UNROLLED
    assert kinds[-1] == IterKind.VECTORIZED
    x, k = _rand(1, cb, h, w, block), _rand(cb, 1, 3, 3, 1, block, seed=1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    ref = sum(xp[:, :, i:i + h, j:j + w, :] * k[None, :, 0, i, j, 0, :][:, :, None, None, :]
              for i in range(3) for j in range(3))
    np.testing.assert_allclose(_run(tensors, x, k), ref, rtol=1e-5, atol=1e-5)
