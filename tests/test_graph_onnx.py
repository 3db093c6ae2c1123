"""ONNX import: models built with onnx.helper (and one exported by PyTorch when installed),
compiled and run, against onnx's own reference evaluator (an independent oracle)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from templtune import graph, relay

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(0)


def _init(name: str, shape: tuple, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype("float32"), name)


def _model(nodes: list, inits: list, in_shape: tuple, out_shape: tuple) -> onnx.ModelProto:
    # NOTE: opset 15: onnx's reference BatchNormalization disagrees with the spec (and with
    # onnxruntime) below opset 14.
    g = helper.make_graph(nodes, "net",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


def _check(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-4) -> graph.Function:
    onnx.checker.check_model(model)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model)
    m = graph.GraphModule(relay.build(mod, "llvm", params))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=rtol, atol=1e-5)
    return mod


def test_cnn_with_batchnorm_residual_pools_and_gemm() -> None:
    c = 8
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c0", "g", "be", "mu", "var"], ["n0"],
                         epsilon=1e-3),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
        helper.make_node("Add", ["r1", "r0"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["p"], ["q"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("GlobalAveragePool", ["q"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["z"], transB=1),
        helper.make_node("Softmax", ["z"], ["y"], axis=1),
    ]
    inits = [_init("w0", (c, 3, 3, 3)), _init("b0", (c,)), _init("w1", (c, 1, 3, 3)),
             numpy_helper.from_array(RNG.uniform(0.5, 1.5, c).astype("float32"), "g"),
             _init("be", (c,)), _init("mu", (c,)),
             numpy_helper.from_array(RNG.uniform(0.5, 2.0, c).astype("float32"), "var"),
             numpy_helper.from_array(np.array(0.0, "float32"), "lo"),
             numpy_helper.from_array(np.array(6.0, "float32"), "hi"),
             _init("wf", (10, c)), _init("bf", (10,))]
    x = RNG.standard_normal((1, 3, 16, 16)).astype("float32")
    mod = _check(_model(nodes, inits, (1, 3, 16, 16), (1, 10)), x)
    ops = [call.op for call in mod.calls()]
    assert "nn.batch_norm" not in ops and ops.count("nn.conv2d") == 2  # BN folded
    assert len([v for v in mod.params if v.name.startswith("b0")]) == 0  # conv bias folded too


def test_matmul_with_constant_weight_and_bias_add() -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    model = _model(nodes, [_init("w", (16, 12)), _init("b", (12,))], (4, 16), (4, 12))
    _check(model, RNG.standard_normal((4, 16)).astype("float32"))


def test_unsupported_operator_and_dynamic_shape_are_named() -> None:
    nodes = [helper.make_node("Round", ["x"], ["r"], name="r0"),
             helper.make_node("Tanh", ["r"], ["t"], name="t0"),
             helper.make_node("Round", ["t"], ["s"], name="r1"),
             helper.make_node("Celu", ["s"], ["y"], name="c0")]
    with pytest.raises(graph.GraphError) as err:  # one error listing every unsupported op
        relay.frontend.from_onnx(_model(nodes, [], (1, 4), (1, 4)))
    msg = str(err.value)
    assert "2 ONNX operator(s)" in msg and "Round (2 nodes, first 'r0')" in msg
    assert "Celu (node 'c0')" in msg and "Tanh" not in msg
    dyn = _model([helper.make_node("Relu", ["x"], ["y"])], [], ("n", 4), ("n", 4))
    with pytest.raises(graph.GraphError, match="dynamic shape"):
        relay.frontend.from_onnx(dyn)
    mod, _ = relay.frontend.from_onnx(dyn, shape={"x": (2, 4)})
    assert mod.params[0].shape == (2, 4)


def test_pytorch_export_round_trip() -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):  # noqa: ANN001, ANN202
            y = torch.relu(self.bn(self.conv(x)))
            y = torch.nn.functional.max_pool2d(y, 2)
            y = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
            return torch.softmax(self.fc(y), 1)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 16, 16)
    buf = io.BytesIO()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buf, dynamo=False, opset_version=13, input_names=["x"],
                          output_names=["y"])
    model = onnx.load_from_string(buf.getvalue())
    _check(model, x.numpy())
    mod, params = relay.frontend.from_onnx(model)
    m = graph.GraphModule(relay.build(mod, "llvm", params))
    m.set_input("x", x.numpy())
    m.run()
    with torch.no_grad():
        np.testing.assert_allclose(m.get_output(0).numpy(), net(x).numpy(), rtol=1e-4,
                                   atol=1e-5)
