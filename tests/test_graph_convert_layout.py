"""``relay.transform.ConvertLayout``: NCHW networks (zoo, onnx.helper-built, torch-exported)
converted to NHWC compute what the numpy interpreter computes on the unconverted network, with
layout transforms only at the edges and the weights re-laid once at build time."""

from __future__ import annotations

import io

import numpy as np
import pytest

import templtune
from templtune import graph, relay, transform
from templtune.graph.fold import fold_constants
from templtune.graph.op import GraphError

NHWC = {"nn.conv2d": ["NHWC", "default"]}


def _convert(mod: graph.Function, opt_level: int = 3) -> graph.Function:
    seq = transform.Sequential([relay.transform.RemoveUnusedFunctions(),
                                relay.transform.ConvertLayout(NHWC)])
    with transform.PassContext(opt_level=opt_level):
        return seq(mod)


def _transforms(mod: graph.Function) -> list[graph.Call]:
    return [c for c in mod.calls() if c.op == "layout_transform"]


def _built(mod: graph.Function, params: dict, **inputs: np.ndarray) -> np.ndarray:
    m = graph.GraphModule(relay.build(mod, "llvm", params=params)["default"](templtune.cpu()))
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    return m.get_output(0).numpy()


def _close(got: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.abs(expected).max())
    assert scale > 0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * scale)


def test_resnet18_keeps_two_layout_transforms_and_relays_weights_once() -> None:
    net, params, _, _ = graph.testing.get_network("resnet-18", 1, "NCHW")
    folded, fparams = fold_constants(_convert(net), params)
    edges = _transforms(folded)
    assert [(c.attr("src_layout"), c.attr("dst_layout")) for c in edges] == [
        ("NCHW", "NHWC"), ("NHWC", "NCHW")]
    assert edges[0].args[0].name == "data"
    assert edges[1].args[0].op == "nn.global_avg_pool2d"
    convs = [c for c in folded.calls() if c.op == "nn.conv2d"]
    assert len(convs) == 20 and all(c.attr("data_layout") == "NHWC" for c in convs)
    for c in convs:  # each kernel is a parameter already in HWIO, the OIHW one dropped
        w = c.args[1]
        assert isinstance(w, graph.Var) and w.name.endswith("_HWIO")
        orig = params[w.name[:-len("_HWIO")]]
        np.testing.assert_array_equal(fparams[w.name], orig.transpose(2, 3, 1, 0))
        assert w.name[:-len("_HWIO")] not in fparams
    assert all(c.attr("layout") == "NHWC" for c in folded.calls() if "pool" in c.op)
    assert folded.body.shape == net.body.shape == (1, 1000)


def test_below_opt_level_3_sequential_skips_it_and_the_pass_alone_runs() -> None:
    net, _, _, _ = graph.testing.get_network("resnet-18", 1, "NCHW", image_shape=(3, 32, 32))
    assert _convert(net, opt_level=2) is net          # TVM: ConvertLayout is an opt_level-3 pass
    seen: list[str] = []
    with transform.PassContext(trace=lambda mod, info, before: seen.append(info.name)):
        out = relay.transform.ConvertLayout(NHWC)(net)
    assert seen == ["ConvertLayout", "ConvertLayout"] and len(_transforms(out)) > 2


@pytest.mark.parametrize("name", ["resnet-18", "mobilenet"])
def test_converted_zoo_network_computes_the_unconverted_reference(name: str) -> None:
    net, params, ishape, _ = graph.testing.get_network(name, 1, "NCHW", image_shape=(3, 32, 32))
    x = np.random.default_rng(0).uniform(size=ishape).astype("float32")
    expected = graph.evaluate(net, params, data=x)
    folded, fparams = fold_constants(_convert(net), params)
    assert len(_transforms(folded)) == 2
    _close(graph.evaluate(folded, fparams, data=x), expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet-18", "mobilenet"])
def test_converted_zoo_network_builds_and_runs(name: str) -> None:
    net, params, ishape, _ = graph.testing.get_network(name, 1, "NCHW", image_shape=(3, 32, 32))
    x = np.random.default_rng(1).uniform(size=ishape).astype("float32")
    _close(_built(_convert(net), params, data=x), graph.evaluate(net, params, data=x))


onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


def _w(name: str, shape: tuple, scale: float = 0.4) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype("float32"), name)


def _model(nodes: list, inits: list, shape: tuple) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cnn() -> onnx.ModelProto:
    """Conv+BN, pads, pooling, depthwise and grouped convs, a residual add, a per-channel
    constant Mul, global max/mean pooling, Concat, Flatten and Gemm."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c0", "g", "be", "mu", "var"], ["bn"]),
        n("Relu", ["bn"], ["r0"]),
        n("Pad", ["r0", "pads"], ["p0"]),
        n("MaxPool", ["p0"], ["m0"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["m0", "wd"], ["d0"], group=8, pads=[1, 1, 1, 1]),   # depthwise
        n("Clip", ["d0", "lo", "hi"], ["k0"]),
        n("Conv", ["k0", "wg"], ["q0"], group=2, pads=[1, 1, 1, 1]),   # grouped: slices + concat
        n("Add", ["q0", "m0"], ["a0"]),                                 # residual
        n("Mul", ["a0", "sc"], ["s0"]),                                 # (C, 1, 1) broadcast
        n("Sigmoid", ["s0"], ["t0"]),
        n("AveragePool", ["t0"], ["v0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("GlobalMaxPool", ["v0"], ["gm"]),
        n("ReduceMean", ["v0", "axes"], ["gr"], keepdims=1),
        n("Concat", ["gm", "gr"], ["cat"], axis=1),
        n("Flatten", ["cat"], ["f"]),
        n("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = [_w("w0", (8, 3, 3, 3)), _w("b0", (8,)), _w("g", (8,)), _w("be", (8,)),
             _w("mu", (8,)), numpy_helper.from_array(np.linspace(0.5, 2, 8, dtype="float32"),
                                                     "var"),
             numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 0, 0, 2], "int64"), "pads"),
             _w("wd", (8, 1, 3, 3)), numpy_helper.from_array(np.float32(0.0), "lo"),
             numpy_helper.from_array(np.float32(1.5), "hi"), _w("wg", (8, 4, 3, 3)),
             _w("sc", (8, 1, 1)), numpy_helper.from_array(np.array([2, 3], "int64"), "axes"),
             _w("wf", (5, 16)), _w("bf", (5,))]
    return _model(nodes, inits, [1, 3, 14, 14])


def test_onnx_built_model_converts_with_transforms_at_the_edges_only() -> None:
    mod, params = relay.frontend.from_onnx(_cnn())
    x = np.random.default_rng(2).uniform(size=(1, 3, 14, 14)).astype("float32")
    expected = graph.evaluate(mod, params, x=x)
    conv = _convert(mod)
    folded, fparams = fold_constants(conv, params)
    data = [c for c in _transforms(folded)]
    assert [(c.attr("src_layout"), c.attr("dst_layout")) for c in data] == [
        ("NCHW", "NHWC"), ("NHWC", "NCHW")], str(folded)
    assert data[1].shape == (1, 16, 1, 1)                       # just before the flatten
    ops = {c.op for c in folded.calls()}
    assert "nn.global_max_pool2d" not in ops and "max" in ops  # a max over H and W in NHWC
    assert all(c.attr("data_layout") == "NHWC" for c in folded.calls() if c.op == "nn.conv2d")
    _close(graph.evaluate(folded, fparams, x=x), expected)
    _close(_built(conv, params, x=x), expected)


def test_an_op_that_needs_nchw_gets_transforms_around_it() -> None:
    n = helper.make_node
    model = _model([n("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
                    n("Resize", ["c0", "", "scales"], ["u"], mode="nearest"),
                    n("Conv", ["u", "w1"], ["y"])],
                   [_w("w0", (4, 3, 3, 3)), _w("w1", (2, 4, 1, 1)),
                    numpy_helper.from_array(np.array([1, 1, 2, 2], "float32"), "scales")],
                   [1, 3, 6, 6])
    mod, params = relay.frontend.from_onnx(model)
    x = np.random.default_rng(3).uniform(size=(1, 3, 6, 6)).astype("float32")
    folded, fparams = fold_constants(_convert(mod), params)
    pairs = [(c.attr("src_layout"), c.attr("dst_layout")) for c in _transforms(folded)]
    assert pairs == [("NCHW", "NHWC"), ("NHWC", "NCHW")] * 2
    assert folded.body.op == "layout_transform" and folded.body.shape == (1, 2, 12, 12)
    _close(graph.evaluate(folded, fparams, x=x), graph.evaluate(mod, params, x=x))


@pytest.mark.slow
def test_torch_exported_model_converts_and_builds() -> None:
    torch = pytest.importorskip("torch")
    nnt = torch.nn

    class Net(nnt.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nnt.Sequential(nnt.Conv2d(3, 8, 3, stride=2, padding=1),
                                       nnt.BatchNorm2d(8), nnt.ReLU(), nnt.MaxPool2d(2))
            self.block = nnt.Sequential(nnt.Conv2d(8, 8, 3, padding=1, groups=8),
                                        nnt.BatchNorm2d(8), nnt.ReLU6(), nnt.Conv2d(8, 8, 1))
            self.head = nnt.Linear(8, 4)

        def forward(self, x):
            y = self.stem(x)
            y = torch.relu(y + self.block(y))
            return self.head(torch.flatten(nnt.functional.adaptive_avg_pool2d(y, 1), 1))

    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        for p in model.modules():
            if isinstance(p, nnt.BatchNorm2d):
                p.running_mean.uniform_(-0.5, 0.5)
                p.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 16, 16)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, opset_version=17, dynamo=False, input_names=["data"])
    mod, params = relay.frontend.from_onnx(onnx.load_from_string(buf.getvalue()))
    with torch.no_grad():
        expected = model(x).numpy()
    _close(graph.evaluate(mod, params, data=x.numpy()), expected)
    conv = _convert(mod)
    assert len(_transforms(fold_constants(conv, params)[0])) == 2
    _close(_built(conv, params, data=x.numpy()), graph.evaluate(mod, params, data=x.numpy()))


def test_converted_tasks_match_the_native_nhwc_network() -> None:
    """Tuning records of the NHWC zoo network serve the converted NCHW one (same workload
    keys for every conv group; weights are folded before extraction, as relay.build does)."""
    from templtune import auto_scheduler

    net, params, _, _ = graph.testing.get_network("resnet-18", 1, "NCHW", image_shape=(3, 64, 64))
    native, nparams, _, _ = graph.testing.get_network("resnet-18", 1, "NHWC",
                                                      image_shape=(64, 64, 3))
    conv_tasks, _ = auto_scheduler.extract_tasks(_convert(net), params, "llvm")
    native_tasks, _ = auto_scheduler.extract_tasks(native, nparams, "llvm")
    keys = {t.workload_key for t in native_tasks}
    conv_keys = [t.workload_key for t in conv_tasks if "conv2d" in t.desc]
    assert len(conv_keys) >= 10 and all(k in keys for k in conv_keys)


@pytest.mark.parametrize("layouts, msg", [
    ({"nn.dense": ["NC"]}, "ConvertLayout converts ['nn.conv2d']"),
    ({"nn.conv2d": ["NCHW16c", "default"]}, "data NCHW or NHWC"),
    ({"nn.conv2d": ["NHWC", "OIHW"]}, "kernel layout 'OIHW' with NHWC data"),
])
def test_unsupported_layouts_are_named(layouts: dict, msg: str) -> None:
    with pytest.raises(GraphError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        relay.transform.ConvertLayout(layouts)



def test_transpose_reductions_softmax_and_batch_norm_follow_the_layout() -> None:
    """Hand-built: each rule's result equals the unconverted network's, and no transform sits
    between the convolution and the ops that follow its layout."""
    from templtune.graph import nn
    from templtune.graph.op import make_call

    x, w = nn.var("x", (1, 3, 6, 5)), nn.var("w", (4, 3, 3, 3))
    stats = [nn.var(f"s{k}", (4,)) for k in range(4)]
    wd, wm = nn.var("wd", (120, 30)), nn.var("wm", (120, 4))
    bn = nn.batch_norm(nn.conv2d(x, w, padding=1), *stats, axis=1)
    sm = nn.softmax(bn, axis=1)
    t = make_call("transpose", [sm], axes=(0, 3, 1, 2))       # (1, 5, 4, 6)
    m = make_call("mean", [bn], axis=(2, 3), keepdims=False)  # (1, 4): H and W reduced
    s = make_call("sum", [bn], axis=(1,), keepdims=False)     # (1, 6, 5): C reduced
    flat = make_call("reshape", [t], newshape=(1, 120))
    ds = nn.dense(make_call("reshape", [s], newshape=(1, 30)), wd)
    out = nn.add(nn.add(flat, ds), nn.dense(m, wm))
    mod = graph.Function((x, w, *stats, wd, wm), out)
    rng = np.random.default_rng(4)
    params = {v.name: rng.standard_normal(v.shape).astype("float32") for v in mod.params[1:]}
    params["s3"] = np.abs(params["s3"]) + 0.5                # variances
    xv = rng.standard_normal(x.shape).astype("float32")
    conv = _convert(mod)
    ops = [c.op for c in conv.calls()]
    # NOTE: the input's and the weight's only: the sum over C leaves N, H, W in their order
    assert ops.count("layout_transform") == 2
    assert all(c.attr("axis") == 3 for c in conv.calls() if c.op in ("nn.softmax", "nn.batch_norm"))
    assert [c.attr("axis") for c in conv.calls() if c.op == "mean"] == [(1, 2)]
    assert [c.attr("axes") for c in conv.calls() if c.op == "transpose"] == [(0, 2, 3, 1)]
    _close(graph.evaluate(conv, params, x=xv), graph.evaluate(mod, params, x=xv))
