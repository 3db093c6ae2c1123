"""Reshape simplification and element-wise diamond fusion: the rewritten networks compute what
the numpy interpreter computes on the original, GELU after a dense runs in the dense kernel's
output stage, and the rules refuse what would change a result or a group's output."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from templtune import graph, transform
from templtune.graph import nn
from templtune.graph.fuse import partition
from templtune.graph.ir import Call, Expr, Function
from templtune.graph.op import make_call
from templtune.graph.ops.elemwise import binary, unary
from templtune.graph.simplify import simplify_reshapes


def _reshape(x: Expr, shape: tuple[int, ...]) -> Call:
    return make_call("reshape", [x], newshape=shape)


def _gelu(y: Expr, params: dict[str, np.ndarray], name: str) -> Expr:
    """GELU as PyTorch exports it: ``y * (erf(y / sqrt 2) + 1) * 0.5``."""
    for k, v in (("sqrt2", math.sqrt(2.0)), ("one", 1.0), ("half", 0.5)):
        params[f"{name}_{k}"] = np.array([v], "float32")
    c = {k: nn.var(f"{name}_{k}", (1,)) for k in ("sqrt2", "one", "half")}
    e = binary("add", unary("erf", binary("divide", y, c["sqrt2"])), c["one"])
    return binary("multiply", binary("multiply", y, e), c["half"])


def _mlp(tokens: int = 7, width: int = 16, hidden: int = 32) -> tuple[Function, dict]:
    """A transformer MLP as an ONNX import gives it: [1, T, C] -> reshape -> dense -> reshape
    back -> bias -> GELU -> reshape -> dense -> reshape -> bias -> residual add."""
    rng = np.random.default_rng(0)
    x = nn.var("x", (1, tokens, width))
    params = {"w1": rng.standard_normal((hidden, width)).astype("float32"),
              "b1": rng.standard_normal(hidden).astype("float32"),
              "w2": rng.standard_normal((width, hidden)).astype("float32"),
              "b2": rng.standard_normal(width).astype("float32")}
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    h1 = _reshape(nn.dense(_reshape(x, (tokens, width)), v["w1"]), (1, tokens, hidden))
    h = _gelu(nn.bias_add(h1, v["b1"], axis=-1), params, "g")
    y = _reshape(nn.dense(_reshape(h, (tokens, hidden)), v["w2"]), (1, tokens, width))
    out = nn.add(x, nn.bias_add(y, v["b2"], axis=2))
    return Function((x, *v.values(), *(nn.var(k, (1,)) for k in params if k[0] == "g")), out,
                    "mlp"), params


def _fix_vars(func: Function, params: dict) -> Function:
    """``func`` with its parameter list the variables its body reads (built ad hoc above)."""
    seen: dict[str, graph.Var] = {}
    for c in func.calls():
        for a in c.args:
            if isinstance(a, graph.Var):
                seen.setdefault(a.name, a)
    return Function(tuple(seen.values()), func.body, func.name)


def _run(func: Function, params: dict, x: np.ndarray, opt_level: int = 3) -> np.ndarray:
    with transform.PassContext(opt_level=opt_level):
        lib = graph.build(func, "llvm", params)
    m = graph.GraphModule(lib)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_mlp_reshapes_sink_and_gelu_fuses_into_the_dense_kernel() -> None:
    func, params = _mlp()
    func = _fix_vars(func, params)
    simple = simplify_reshapes(func)
    ops = [c.op for c in simple.calls()]
    # the reshape back to [1, T, hidden] met the next reshape to 2-D: both went
    assert ops.count("reshape") == 2, ops
    groups = partition(simple)
    assert [g.calls[0].op for g in groups[:3]] == ["reshape", "nn.dense", "nn.dense"], groups
    gelu = groups[1]
    assert [c.op for c in gelu.calls] == ["nn.dense", "nn.bias_add", "divide", "erf", "add",
                                          "multiply", "multiply"]
    # the residual add joins the dense (x reshaped like the dense's rows: a view on CPUs)
    assert [c.op for c in groups[2].calls] == ["nn.dense", "nn.bias_add", "add", "reshape"]
    x = np.random.default_rng(1).standard_normal((1, 7, 16)).astype("float32")
    ref = graph.evaluate(func, params, x=x)
    np.testing.assert_allclose(graph.evaluate(simple, params, x=x), ref, rtol=1e-5, atol=1e-5)
    with transform.PassContext(opt_level=3):
        lib = graph.build(func, "llvm", params)
    dense = [cg for cg in lib.groups if cg.group.calls[0].op == "nn.dense"]
    # the template computes bias + GELU in its output stage: one kernel, no tail kernel
    assert len(dense[0].steps) == 1 and dense[0].group.calls[-1].op == "multiply"
    assert [len(cg.kernels) for cg in dense] == [1, 1]
    np.testing.assert_allclose(_run(func, params, x), ref, rtol=1e-4, atol=1e-4)


def test_simplify_is_off_without_fusion_and_traced() -> None:
    func, params = _mlp()
    func = _fix_vars(func, params)
    seen = []
    with transform.PassContext(opt_level=0, trace=lambda m, i, b: seen.append(i.name)):
        graph.build(func, "llvm", params)
    assert "SimplifyExpr" not in seen
    with transform.PassContext(opt_level=3, disabled_pass=["SimplifyExpr"]):
        lib = graph.build(func, "llvm", params)
    assert any(c.op == "reshape" and c.shape == (1, 7, 32) for cg in lib.groups
               for c in cg.group.calls)


def test_merge_and_drop_reshapes() -> None:
    x = nn.var("x", (2, 3, 4))
    r = _reshape(_reshape(_reshape(x, (6, 4)), (24,)), (2, 3, 4))
    out = nn.relu(nn.add(r, r))
    func = simplify_reshapes(Function((x,), out))
    assert [c.op for c in func.calls()] == ["add", "nn.relu"]
    keep = Function((x,), _reshape(_reshape(x, (6, 4)), (4, 6)))
    assert [c.shape for c in simplify_reshapes(keep).calls()] == [(4, 6)]
    alone = Function((x,), _reshape(x, (2, 3, 4)))  # a no-op output: kept, as a call
    assert simplify_reshapes(alone) is alone


@pytest.mark.parametrize("other", [(3,), (3, 1), (1, 1, 3, 1)])
def test_no_sink_where_broadcast_would_change(other: tuple[int, ...]) -> None:
    """``(1, 3, 1, 3)`` reshaped from ``(3, 3)``: an operand whose non-unit dims would land on
    other axes of the input (or that has more axes than it) keeps the reshape where it is."""
    x = nn.var("x", (3, 3))
    c = nn.var("c", other)
    r = _reshape(x, (1, 3, 1, 3))
    func = Function((x, c), binary("multiply", r, c))
    simple = simplify_reshapes(func)
    xs = np.arange(9, dtype="float32").reshape(3, 3)
    cs = np.arange(1, 1 + math.prod(other), dtype="float32").reshape(other)
    np.testing.assert_array_equal(graph.evaluate(simple, {"c": cs}, x=xs),
                                  graph.evaluate(func, {"c": cs}, x=xs))
    if other != (3,):
        assert simple.calls()[0].op == "reshape"


def test_no_sink_when_another_op_reads_the_reshape() -> None:
    x = nn.var("x", (4, 8))
    w = nn.var("w", (8, 8))
    r = _reshape(x, (1, 4, 8))
    out = nn.add(nn.relu(r), _reshape(nn.dense(_reshape(r, (4, 8)), w), (1, 4, 8)))
    func = Function((x, w), out)
    simple = simplify_reshapes(func)
    relu = next(c for c in simple.calls() if c.op == "nn.relu")
    assert relu.shape == (1, 4, 8)  # the dense reads the reshape too: it stays


_SHAPES = st.lists(st.integers(1, 3), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(core=_SHAPES, units=st.lists(st.integers(0, 3), min_size=2, max_size=2),
       ops=st.lists(st.sampled_from(["relu", "add", "multiply", "bias", "erf", "full",
                                     "transpose"]), min_size=1, max_size=4),
       keep=st.lists(st.booleans(), min_size=8, max_size=8), seed=st.integers(0, 99),
       flatten=st.booleans())
def test_simplified_networks_compute_the_same(core, units, ops, keep, seed, flatten) -> None:
    """Random element-wise chains over a reshape that adds/drops unit dims, with constants of
    random broadcastable shapes or of the full shape, transposes (of unit axes only, or any)
    and a batch_flatten: the simplified network computes the same values."""
    rng = np.random.default_rng(seed)

    def with_units(n: int) -> tuple[int, ...]:
        shape = list(core)
        for _ in range(n):
            shape.insert(int(rng.integers(0, len(shape) + 1)), 1)
        return tuple(shape)

    a_shape, r_shape = with_units(units[0]), with_units(units[1])
    x = nn.var("x", a_shape)
    e: Expr = _reshape(x, r_shape)
    params: dict[str, np.ndarray] = {}
    for k, op in enumerate(ops):
        shape = e.shape
        if op in ("add", "multiply", "full"):
            if op != "full":
                shape = tuple(d if keep[j % 8] else 1 for j, d in enumerate(shape))
                shape = shape[int(rng.integers(0, len(shape) + 1)):]
            params[f"c{k}"] = rng.standard_normal(shape).astype("float32")
            e = binary("add" if op == "full" else op, e, nn.var(f"c{k}", shape))
        elif op == "bias":
            axis = int(rng.integers(0, len(shape)))
            params[f"c{k}"] = rng.standard_normal(shape[axis]).astype("float32")
            e = nn.bias_add(e, nn.var(f"c{k}", (shape[axis],)), axis=axis)
        elif op == "transpose":
            e = make_call("transpose", [e], axes=tuple(int(v) for v in
                                                      rng.permutation(len(shape))))
        elif op == "relu":
            e = nn.relu(e)
        else:
            e = unary("erf", e)
    if flatten:
        e = make_call("nn.batch_flatten", [_reshape(e, (1, *e.shape))])
    func = _fix_vars(Function((x,), _reshape(e, (math.prod(core),))), params)
    xs = rng.standard_normal(a_shape).astype("float32")
    ref = graph.evaluate(func, params, x=xs)
    np.testing.assert_allclose(graph.evaluate(simplify_reshapes(func), params, x=xs), ref,
                               rtol=1e-6, atol=1e-6)


def test_silu_after_a_conv_joins_its_group() -> None:
    """``y * sigmoid(y)`` (SiLU, as EfficientNet exports it) after a conv: one group, the conv
    template's epilogue, NCHW[x]c at opt_level 3 included."""
    rng = np.random.default_rng(2)
    x = nn.var("x", (1, 8, 10, 10))
    w = nn.var("w", (16, 8, 3, 3))
    b = nn.var("b", (16,))
    y = nn.bias_add(nn.conv2d(x, w, padding=(1, 1)), b)
    func = Function((x, w, b), binary("multiply", y, unary("sigmoid", y)))
    params = {"w": rng.standard_normal((16, 8, 3, 3)).astype("float32"),
              "b": rng.standard_normal(16).astype("float32")}
    assert [[c.op for c in g.calls] for g in partition(func)] == [
        ["nn.conv2d", "nn.bias_add", "sigmoid", "multiply"]]
    xs = rng.standard_normal((1, 8, 10, 10)).astype("float32")
    ref = graph.evaluate(func, params, x=xs)
    for level in (2, 3):
        np.testing.assert_allclose(_run(func, params, xs, level), ref, rtol=1e-4, atol=1e-4)


def test_forks_that_do_not_meet_again_stay_apart() -> None:
    """A value read by an element-wise op and by another anchor: no single value leaves the
    element-wise side, so nothing merges (and the dense's input stays a group output)."""
    x = nn.var("x", (4, 8))
    w = nn.var("w", (8, 8))
    y = nn.dense(x, w)
    func = Function((x, w), nn.add(nn.relu(y), nn.dense(y, w)))
    assert [[c.op for c in g.calls] for g in partition(func)] == [
        ["nn.dense"], ["nn.dense"], ["nn.relu", "add"]]
    assert [len(g.calls) for g in partition(func, fuse=False)] == [1, 1, 1, 1]


def test_attention_projection_and_residual_join_the_dense_kernel() -> None:
    """PyTorch's attention output as ONNX gives it: dense -> bias -> reshape to [T, 1, C] ->
    transpose to [1, T, C] (only the unit axis moves) -> add the residual stream [1, T, C].
    The transpose is a reshape, the residual is reshaped like the dense's rows, and the add
    runs in the dense kernel's epilogue; a transpose of non-unit axes stays."""
    rng = np.random.default_rng(3)
    t, c = 6, 16
    x = nn.var("x", (1, t, c))
    w, b = nn.var("w", (c, c)), nn.var("b", (c,))
    params = {"w": rng.standard_normal((c, c)).astype("float32"),
              "b": rng.standard_normal(c).astype("float32")}
    res = nn.relu(x)  # the residual stream, a 3-D value computed in the network
    flat = make_call("nn.batch_flatten", [make_call("transpose", [res], axes=(1, 0, 2))])
    y = nn.bias_add(nn.dense(flat, w), b, axis=-1)
    y = make_call("transpose", [_reshape(y, (t, 1, c))], axes=(1, 0, 2))
    swapped = make_call("transpose", [_reshape(y, (1, t, 2, c // 2))], axes=(0, 2, 1, 3))
    moved = simplify_reshapes(Function((x, w, b), _reshape(swapped, (1, 2 * t, c // 2))))
    assert "transpose" in [k.op for k in moved.calls()]  # the (t, 2) swap moves data
    func = Function((x, w, b), nn.add(res, y))
    simple = simplify_reshapes(func)
    assert "transpose" not in [k.op for k in simple.calls()]
    groups = [[k.op for k in g.calls] for g in partition(simple)]
    assert ["nn.dense", "nn.bias_add", "add", "reshape"] in groups, groups
    xs = rng.standard_normal((1, t, c)).astype("float32")
    ref = graph.evaluate(func, params, x=xs)
    np.testing.assert_allclose(graph.evaluate(simple, params, x=xs), ref, rtol=1e-5, atol=1e-5)
    with transform.PassContext(opt_level=3):
        lib = graph.build(func, "llvm", params)
    dense = next(cg for cg in lib.groups if cg.group.calls[0].op == "nn.dense")
    assert len(dense.kernels) == 1
    np.testing.assert_allclose(_run(func, params, xs), ref, rtol=1e-4, atol=1e-4)
