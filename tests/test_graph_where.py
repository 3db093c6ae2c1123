"""The ``where`` network op, its ONNX import, and the fold that turns a ``where`` over a bound
condition and a huge fill into an additive mask (what a GPT-2 export's causal mask becomes),
each against numpy or ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import build_run

from templtune import graph, relay, transform
from templtune.graph import nn
from templtune.graph.fold import HUGE, fold_constants
from templtune.graph.ir import Function
from templtune.graph.op import GraphError
from templtune.graph.ops.elemwise import where

MIN = float(np.finfo(np.float32).min)


def test_where_broadcasts_and_matches_numpy_on_both_targets() -> None:
    rng = np.random.default_rng(0)
    c = rng.standard_normal((4, 1, 6)).astype(np.float32)
    c[c > 0.3] = 0.0
    c[0, 0, 0] = np.nan  # true, as numpy's nonzero test reads it
    x = rng.standard_normal((3, 6)).astype(np.float32)
    y = rng.standard_normal((4, 3, 1)).astype(np.float32)
    vs = [nn.var(n, a.shape) for n, a in zip("cxy", (c, x, y))]
    call = where(*vs)
    assert call.shape == (4, 3, 6)
    expected = np.where(c != 0, x, y)
    feeds = dict(zip("cxy", (c, x, y)))
    func = Function(tuple(vs), call)
    np.testing.assert_array_equal(graph.evaluate(func, {}, **feeds), expected)
    for target in ("llvm", "cuda"):
        got, _ = build_run(func, {}, feeds, target)
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(GraphError, match="do not broadcast"):
        where(nn.var("a", (2, 3)), nn.var("b", (4, 3)), nn.var("d", (3,)))


def _masked(fill_first: bool, shape: tuple[int, ...] = (2, 5, 5)) -> Function:
    x = nn.var("x", shape)
    cond, fill = nn.var("cond", shape[-2:]), nn.var("fill", (1,))
    s = relay.nn.softmax(x, axis=-1)
    return Function((x, cond, fill), where(cond, fill, s) if fill_first else where(cond, s, fill))


@pytest.mark.parametrize("fill", [MIN, -np.inf, -HUGE, HUGE])
@pytest.mark.parametrize("fill_first", [False, True])
def test_where_with_a_huge_bound_fill_folds_into_an_exact_add(fill: float,
                                                              fill_first: bool) -> None:
    func = _masked(fill_first)
    causal = np.tril(np.ones((5, 5), np.float32))
    params = {"cond": 1.0 - causal if fill_first else causal,
              "fill": np.array([fill], np.float32)}
    folded, bound = fold_constants(func, params)
    assert [c.op for c in folded.calls()] == ["nn.softmax", "add"]
    (bias,) = (v for v in folded.params if v.name in bound)
    np.testing.assert_array_equal(bound[bias.name], np.where(causal != 0, 0, fill))
    x = (np.random.default_rng(1).standard_normal((2, 5, 5)) * 1e3).astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    expected = np.where(causal != 0, e / e.sum(axis=-1, keepdims=True), np.float32(fill))
    got, _ = build_run(func, params, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    assert np.array_equal(got[..., causal == 0], expected[..., causal == 0])


@pytest.mark.parametrize("params", [
    {"cond": np.tril(np.ones((5, 5), np.float32)), "fill": np.array([-1e4], np.float32)},
    {"fill": np.array([MIN], np.float32)},  # the condition is a run-time input
], ids=["small-fill", "runtime-condition"])
def test_other_wheres_stay_and_compute_the_same(params: dict[str, np.ndarray]) -> None:
    func = _masked(False)
    folded, _ = fold_constants(func, params)
    assert [c.op for c in folded.calls()] == ["nn.softmax", "where"]
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 5, 5)).astype(np.float32)}
    if "cond" not in params:
        feeds["cond"] = (rng.random((5, 5)) < 0.5).astype(np.float32)
    cond = params.get("cond", feeds.get("cond"))
    e = np.exp(feeds["x"] - feeds["x"].max(axis=-1, keepdims=True))
    expected = np.where(cond != 0, e / e.sum(axis=-1, keepdims=True), params["fill"][0])
    got, _ = build_run(func, params, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_onnx_where_and_small_powers_match_the_reference_evaluator() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    keep = np.tril(np.ones((1, 6, 6), bool))
    nodes = [helper.make_node("Pow", ["x", "three"], ["cube"]),
             helper.make_node("Pow", ["x", "two"], ["square"]),
             helper.make_node("Pow", ["x", "half"], ["root"]),
             helper.make_node("Add", ["cube", "square"], ["s"]),
             helper.make_node("Where", ["keep", "s", "fill"], ["masked"]),
             helper.make_node("Add", ["masked", "root"], ["y"])]
    inits = [numpy_helper.from_array(keep, "keep"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(-7.5, np.float32), "fill")]
    g = helper.make_graph(nodes, "net",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 6, 6))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 6, 6))],
                          initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(3).uniform(0.1, 2.0, (2, 6, 6)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model)
    ops = [c.op for c in mod.calls()]
    # NOTE: x^2 and x^3 as products (a pow call does not vectorize); x^0.5 stays a power
    assert ops.count("power") == 1 and ops.count("where") == 1
    got, _ = build_run(mod, params, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_task_extraction_sees_the_folded_mask_as_relay_build_does() -> None:
    """``autotvm.task.extract_from_program`` (what ``tune-network`` runs) folds the causal
    ``where`` as ``relay.build`` does, so it tunes the fused kernel the build runs."""
    from templtune import autotvm

    q, k, v = (nn.var(n, (3, 7, 8)) for n in "qkv")
    cond, fill = nn.var("cond", (7, 7)), nn.var("fill", (1,))
    s = where(cond, nn.batch_matmul(q, k), fill)
    func = Function((q, k, v, cond, fill), nn.batch_matmul(relay.nn.softmax(s, axis=-1), v,
                                                           transpose_b=False))
    params = {"cond": np.tril(np.ones((7, 7), np.float32)), "fill": np.array([MIN], np.float32)}
    with transform.PassContext(opt_level=3):
        tasks = autotvm.task.extract_from_program(func, params, "llvm")
    assert [(t.name, t.args) for t in tasks] == [("batch_attention",
                                                  (3, 7, 7, 8, 8, 1, 0, 1, 1))]
    rng = np.random.default_rng(4)
    feeds = {n: rng.standard_normal((3, 7, 8)).astype(np.float32) for n in "qkv"}
    got, lib = build_run(func, params, feeds)
    assert "autotvm:batch_attention" in [g.impl for g in lib.groups]
    sc = np.where(params["cond"] != 0, feeds["q"] @ feeds["k"].transpose(0, 2, 1), MIN)
    e = np.exp(sc - sc.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(axis=-1, keepdims=True)) @ feeds["v"],
                               rtol=1e-4, atol=1e-5)
