"""``take`` (an embedding lookup by integer ids) and ``cast``, the network's first ops whose
values differ in dtype, and the ONNX import of a transformer's token-id and attention-mask
inputs (``Gather`` on run-time indices, ``Cast``), each against numpy or ONNX's reference
evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import build_run

from templtune import graph, relay, transform
from templtune.graph import nn
from templtune.graph.ir import Function
from templtune.graph.op import GraphError, make_call
from templtune.graph.ops.elemwise import binary


@pytest.mark.parametrize("target", ["llvm", "cuda"])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_take_clamps_ids_and_fuses_with_cast_on_both_targets(target: str,
                                                             index_dtype: str) -> None:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 24)).astype(np.float32)
    pos = rng.standard_normal((7, 24)).astype(np.float32)
    # NOTE: -1 is the last row; 60, -70 and 2**40 lie outside the table and clamp to an end
    big = 2 ** 40 if index_dtype == "int64" else 2 ** 30
    ids = np.array([[0, 3, 49, -1, -50, 60, -70], [1, 2, 3, 4, 5, 6, big]], index_dtype)
    mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0]], index_dtype)
    vi, vm = nn.var("ids", ids.shape, index_dtype), nn.var("mask", mask.shape, index_dtype)
    vt, vp = nn.var("table", table.shape), nn.var("pos", pos.shape)
    one, low = nn.var("one", (1,)), nn.var("low", (1,))
    h = relay.add(relay.take(vt, vi, axis=0), vp)
    m = make_call("reshape", [relay.cast(vm, "float32")], newshape=(2, 7, 1))
    bias = binary("multiply", binary("subtract", one, m), low)
    func = Function((vi, vm, vt, vp, one, low), relay.add(h, bias))
    params = {"table": table, "pos": pos, "one": np.ones(1, np.float32),
              "low": np.full(1, -1e4, np.float32)}
    rows = np.clip(np.where(ids < 0, ids + 50, ids), 0, 49)
    expected = table[rows] + pos + (1.0 - mask[..., None].astype(np.float32)) * -1e4
    np.testing.assert_array_equal(graph.evaluate(func, params, ids=ids, mask=mask), expected)
    got = build_run(func, params, {"ids": ids, "mask": mask}, target)[0]
    np.testing.assert_array_equal(got, expected)


def test_take_along_an_inner_axis_and_cast_to_int_truncate_as_numpy() -> None:
    x = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3) - 14.5
    idx = np.array([[4, 0], [-2, 9]], np.int32)
    vx, vi = nn.var("x", x.shape), nn.var("i", idx.shape, "int32")
    picked = relay.take(vx, vi, axis=-2)
    assert picked.shape == (2, 2, 2, 3) and picked.dtype == "float32"
    func = Function((vx, vi), relay.cast(picked, "int32"))
    assert func.body.dtype == "int32"
    expected = np.take(x, np.clip(np.where(idx < 0, idx + 5, idx), 0, 4), axis=1).astype(np.int32)
    got = build_run(func, {}, {"x": x, "i": idx})[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_bad_dtypes_and_axes_name_the_problem() -> None:
    table = nn.var("table", (10, 4))
    with pytest.raises(GraphError, match="indices must be int32 or int64, got 'float32'"):
        relay.take(table, nn.var("f", (3,)))
    with pytest.raises(GraphError, match="axis 2 is out of range"):
        relay.take(table, nn.var("i", (3,), "int64"), axis=2)
    with pytest.raises(GraphError, match="not 'float16'"):
        relay.cast(table, "float16")
    with pytest.raises(GraphError, match="mixed input dtypes"):
        relay.add(table, nn.var("j", (10, 4), "int64"))
    ids = nn.var("ids", (3,), "int64")
    with transform.PassContext(opt_level=3):
        lib = relay.build(Function((ids, table), relay.take(table, ids)), "llvm",
                          params={"table": np.ones((10, 4), np.float32)})
    m = graph.GraphModule(lib)
    with pytest.raises(GraphError, match="input 'ids' is int64; got float32 values"):
        m.set_input("ids", np.zeros(3, np.float32))


def _token_model(onnx):  # type: ignore[no-untyped-def]
    """A transformer's input stage as HF exports it: word and position embeddings looked up,
    summed, and the int64 attention mask turned into an additive bias."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Gather", ["word", "input_ids"], ["w"]),
             helper.make_node("Gather", ["position", "pos_ids"], ["p"]),
             helper.make_node("Add", ["w", "p"], ["h"]),
             helper.make_node("Unsqueeze", ["attention_mask", "axes"], ["m"]),
             helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "minimum"], ["bias"]),
             helper.make_node("Add", ["h", "bias"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((30, 8)).astype(np.float32), "word"),
             numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32),
                                     "position"),
             numpy_helper.from_array(np.arange(6, dtype=np.int64)[None], "pos_ids"),
             numpy_helper.from_array(np.array([2], np.int64), "axes"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(-3.0e38, np.float32), "minimum")]
    g = helper.make_graph(nodes, "tokens",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, (1, 6)),
                           helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                                         (1, 6))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 6, 8))],
                          initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_onnx_token_ids_and_mask_inputs_match_the_reference_evaluator() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    model = _token_model(onnx)
    mod, params = relay.frontend.from_onnx(model)
    assert [(v.name, v.dtype) for v in mod.params if v.name not in params] == [
        ("input_ids", "int64"), ("attention_mask", "int64")]
    assert {"take", "cast"} <= {c.op for c in mod.calls()}
    feeds = {"input_ids": np.array([[5, 29, 0, 7, 7, 12]], np.int64),
             "attention_mask": np.array([[1, 1, 1, 1, 0, 0]], np.int64)}
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(build_run(mod, params, feeds)[0], expected)


def test_onnx_inputs_of_other_element_types_are_refused_by_name() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto

    model = _token_model(onnx)
    model.graph.input[1].type.tensor_type.elem_type = TensorProto.BOOL
    with pytest.raises(GraphError, match="input 'attention_mask': ONNX element type BOOL"):
        relay.frontend.from_onnx(model)
