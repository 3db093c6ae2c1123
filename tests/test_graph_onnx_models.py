"""ONNX import of real model files: graphs built with onnx.helper for the tensor operators
(checked against ``onnx.reference``), and models exported by PyTorch (``torch.onnx.export``,
opset 17): a small module in the default run, torchvision's classifiers and a small ViT as
slow tests — imported, built for llvm, and compared to PyTorch's own output.

torch and torchvision are optional (``pip install torch==2.13.0`` and
``pip install --no-deps torchvision==0.28.0``); without them those tests skip.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import types

import numpy as np
import pytest

from templtune import graph, relay

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(0)


def _c(name: str, value: np.ndarray | list, dtype: str = "float32") -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _w(name: str, shape: tuple, scale: float = 0.4) -> onnx.TensorProto:
    return _c(name, RNG.standard_normal(shape) * scale)


def _model(nodes: list, inits: list, in_shape: tuple, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "net",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, graph.Function]:
    mod, params = relay.frontend.from_onnx(model)
    m = graph.GraphModule(relay.build(mod, "llvm", params))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    return m.get_output(0).numpy(), mod


def _against_reference(model: onnx.ModelProto, x: np.ndarray) -> graph.Function:
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, expected.shape))
    onnx.checker.check_model(model, full_check=True)
    got, mod = _run(model, {"x": x})
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * scale)
    return mod


def test_cnn_ops_grouped_conv_pools_resize_split_gemm_variants() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "wd"], ["d0"], group=4, pads=[1, 1, 1, 1]),  # 2 per channel
        helper.make_node("Conv", ["d0", "w0", "b0"], ["c0"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c0"], ["s0"]),
        helper.make_node("Pow", ["s0", "p15"], ["s1"]),
        helper.make_node("BatchNormalization", ["s1", "g", "be", "mu", "var"], ["n0"]),
        helper.make_node("HardSwish", ["n0"], ["h0"]),
        helper.make_node("MaxPool", ["h0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2],
                         ceil_mode=1),
        helper.make_node("AveragePool", ["p0"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Pad", ["p1", "pads", "pv"], ["p2"]),
        helper.make_node("Resize", ["p2", "", "", "sizes"], ["r0"], mode="linear",
                         coordinate_transformation_mode="align_corners"),
        helper.make_node("Resize", ["r0", "", "scales"], ["r1"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Split", ["r1", "split"], ["a", "b"], axis=1),
        helper.make_node("HardSigmoid", ["b"], ["hb"], alpha=0.3, beta=0.4),
        helper.make_node("Mul", ["a", "hb"], ["m0"]),
        helper.make_node("Sub", ["m0", "row"], ["m1"]),  # broadcast along W
        helper.make_node("GlobalMaxPool", ["m1"], ["gm"]),
        helper.make_node("Flatten", ["gm"], ["f"]),
        helper.make_node("Gemm", ["f", "wg", "cg"], ["z"], alpha=0.5, beta=2.0),
        helper.make_node("Gemm", ["z", "wt", "ct"], ["z2"], transA=1, transB=1),
        helper.make_node("LeakyRelu", ["z2"], ["y"], alpha=0.1),
    ]
    inits = [_w("wd", (8, 1, 3, 3)), _w("w0", (6, 4, 3, 3)), _w("b0", (6,)),
             _c("g", RNG.uniform(0.5, 1.5, 6)), _w("be", (6,)), _w("mu", (6,)),
             _c("var", RNG.uniform(0.5, 2.0, 6)),
             _c("p15", 1.5), _c("pads", [0, 0, 1, 0, 0, 0, 0, 2], "int64"), _c("pv", 0.25),
             _c("sizes", [1, 6, 7, 5], "int64"), _c("scales", [1, 1, 2, 2]),
             _c("split", [3, 3], "int64"), _w("row", (1, 10)), _w("wg", (3, 5)),
             _w("cg", (1, 5)), _w("wt", (3, 1)), _w("ct", (3,))]
    x = RNG.standard_normal((1, 4, 10, 10)).astype("float32")
    mod = _against_reference(_model(nodes, inits, (1, 4, 10, 10)), x)
    ops = [c.op for c in mod.calls()]
    # a depthwise conv with multiplier 2 and a grouped conv: one op each, not per group
    assert sorted(c.attr("groups") for c in mod.calls() if c.op == "nn.conv2d") == [2, 4]
    assert "concatenate" not in ops
    assert {"image.resize2d", "nn.pad", "nn.global_max_pool2d", "strided_slice",
            "power"} <= set(ops)


def test_attention_ops_layernorm_batched_matmul_folded_shapes() -> None:
    d, h = 8, 2
    nodes = [
        helper.make_node("LayerNormalization", ["x", "lg", "lb"], ["ln"], epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "wq"], ["q0"]),
        helper.make_node("Add", ["q0", "bq"], ["q1"]),
        # shape arithmetic on an activation, folded at import: Shape -> Gather -> Concat
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "i0"], ["bsz"], axis=0),
        helper.make_node("Unsqueeze", ["bsz", "ax0"], ["bsz1"]),
        helper.make_node("Concat", ["bsz1", "rest"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["q1", "newshape"], ["q2"]),
        helper.make_node("Transpose", ["q2"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),  # both operands activations
        helper.make_node("Constant", [], ["sc"], value_float=float(np.sqrt(d // h))),
        helper.make_node("Div", ["s0", "sc"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["s2"], axis=-1),
        helper.make_node("MatMul", ["s2", "q"], ["o0"]),
        helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o1", "flat"], ["o2"]),
        helper.make_node("ReduceMean", ["o2"], ["mu"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["o2", "mu"], ["o3"]),
        helper.make_node("Pow", ["o3", "two"], ["o4"]),
        helper.make_node("Erf", ["o4"], ["e0"]),
        helper.make_node("Slice", ["e0", "st", "en", "axs"], ["sl"]),
        helper.make_node("Gather", ["sl", "i1"], ["gt"], axis=1),
        helper.make_node("Unsqueeze", ["gt", "ax1"], ["us"]),
        helper.make_node("Squeeze", ["us", "ax1"], ["sq"]),
        helper.make_node("Concat", ["sq", "cst"], ["cc"], axis=-1),
        helper.make_node("Tanh", ["cc"], ["y"]),
    ]
    inits = [_c("lg", RNG.uniform(0.5, 1.5, d)), _w("lb", (d,)), _w("wq", (d, d)), _w("bq", (d,)),
             _c("i0", 0, "int64"), _c("ax0", [0], "int64"), _c("rest", [-1, h, d // h], "int64"),
             _c("flat", [0, 0, d], "int64"), _c("two", 2.0),
             _c("st", [1, 2], "int64"), _c("en", [5, 100], "int64"), _c("axs", [1, -1], "int64"),
             _c("i1", [0, 2], "int64"), _c("ax1", [1], "int64"), _w("cst", (3, 2, 2))]
    x = RNG.standard_normal((3, 5, d)).astype("float32")
    mod = _against_reference(_model(nodes, inits, (3, 5, d)), x)
    ops = [c.op for c in mod.calls()]
    assert ops.count("nn.batch_matmul") == 2 and "nn.layer_norm" in ops and "erf" in ops


def test_concat_of_many_inputs_builds() -> None:
    """DenseNet-style: one Concat of 24 inputs (each a Relu of a channel slice)."""
    n = 24
    nodes = [helper.make_node("Split", ["x"], [f"s{k}" for k in range(n)], axis=1,
                              num_outputs=n)]
    nodes += [helper.make_node("Relu", [f"s{k}"], [f"r{k}"]) for k in range(n)]
    nodes += [helper.make_node("Concat", [f"r{k}" for k in reversed(range(n))], ["y"], axis=1)]
    x = RNG.standard_normal((1, n, 3, 3)).astype("float32")
    mod = _against_reference(_model(nodes, [], (1, n, 3, 3), opset=18), x)
    assert [c.op for c in mod.calls()].count("concatenate") == 1


# ---- PyTorch exports -----------------------------------------------------------------------------
def _torchvision() -> types.ModuleType:
    pytest.importorskip("torch")
    if "torchvision" in sys.modules:
        import torchvision.models

        return sys.modules["torchvision"]
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    try:
        import torchvision
    except (RuntimeError, OSError):
        # NOTE: a torchvision wheel built for another torch variant (CUDA vs CPU) fails to load
        # its C++ ops at import; the model definitions are pure Python and do not need them.
        spec = importlib.util.find_spec("torchvision")
        pkg = types.ModuleType("torchvision")
        pkg.__path__ = list(spec.submodule_search_locations or [])
        pkg.__spec__ = spec
        sys.modules["torchvision"] = pkg
        torchvision = pkg
    import torchvision.models  # noqa: F401

    return torchvision


def _export(model, x) -> onnx.ModelProto:
    import torch

    buf = io.BytesIO()
    # NOTE: not under no_grad: there nn.MultiheadAttention takes a fused kernel that has no
    # ONNX export.
    torch.onnx.export(model, (x,), buf, opset_version=17, dynamo=False,
                      input_names=["data"], output_names=["out"])
    return onnx.load_from_string(buf.getvalue())


def _against_torch(model, shape: tuple[int, ...]) -> graph.Function:
    import torch

    torch.manual_seed(0)
    model = model.eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = model(x).numpy()
    got, mod = _run(_export(model, x), {"data": x.numpy()})
    scale = float(np.abs(expected).max())
    assert scale > 0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * scale)
    return mod


def test_torch_module_with_attention_resize_concat_layernorm() -> None:
    torch = pytest.importorskip("torch")
    nnt = torch.nn

    class Net(nnt.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nnt.Conv2d(3, 8, 3, stride=2, padding=1)
            self.se = nnt.Conv2d(8, 8, 1)
            self.ln = nnt.LayerNorm(16)
            self.proj = nnt.Linear(16, 16)
            self.head = nnt.Linear(16, 5)

        def forward(self, x):
            y = self.conv(x)
            y = y * torch.sigmoid(self.se(y.mean((2, 3), keepdim=True)))  # broadcast Mul
            up = nnt.functional.interpolate(y, scale_factor=2, mode="nearest")
            lin = nnt.functional.interpolate(y, size=(8, 8), mode="bilinear",
                                             align_corners=False)
            z = torch.cat([up, lin], 1)                       # (1, 16, 8, 8)
            t = self.ln(z.flatten(2).transpose(1, 2))         # (1, 64, 16)
            q = self.proj(t)
            att = torch.softmax(q @ t.transpose(1, 2) / 4.0, dim=-1)
            o = (att @ t).reshape(1, 8, 8, 16).permute(0, 3, 1, 2)
            return self.head(nnt.functional.hardswish(o).amax((2, 3)) + o.mean((2, 3)))

    _against_torch(Net(), (1, 3, 8, 8))


def _attention_kernel_matches_torch(model, x) -> None:
    """``model`` exported, built at opt_level 3 with its attention as one
    ``nn.batch_attention`` kernel, and run on ``x``: the same output as PyTorch's."""
    import torch

    from templtune import transform

    with torch.no_grad():
        expected = model(x).numpy()
    mod, params = relay.frontend.from_onnx(_export(model, x))
    with transform.PassContext(opt_level=3):
        lib = relay.build(mod, "llvm", params)
    assert "autotvm:batch_attention" in [g.impl for g in lib.groups]
    m = graph.GraphModule(lib)
    m.set_input("data", x.numpy())
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_torch_masked_attention_runs_as_one_kernel_and_matches_pytorch() -> None:
    """A BERT-style export: ``q @ k^T / sqrt(d) + mask`` with a padding mask per sequence,
    batch 2 (the scores regrouped as [batch, heads, T, T]): one ``nn.batch_attention``."""
    torch = pytest.importorskip("torch")
    nnt = torch.nn

    class Attention(nnt.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nnt.ModuleList(nnt.Linear(32, 32) for _ in range(3))
            keep = torch.ones(2, 10)
            keep[0, 7:] = keep[1, 4:] = 0.0
            self.register_buffer("mask", ((1.0 - keep) * -10000.0)[:, None, None, :])

        def forward(self, x):
            q, k, v = (m(x).view(2, 10, 4, 8).permute(0, 2, 1, 3) for m in self.qkv)
            s = torch.matmul(q, k.transpose(-1, -2)) / 8 ** 0.5 + self.mask
            return torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3).reshape(2, 10, 32)

    torch.manual_seed(0)
    model = Attention().eval()
    x = torch.randn(2, 10, 32)
    _attention_kernel_matches_torch(model, x)


def test_torch_causal_decoder_block_runs_attention_as_one_kernel() -> None:
    """A GPT-2-style export: one projection split into q, k, v, the causal mask as
    ``where(causal, scores, finfo.min)``, and the tanh GELU with ``pow(x, 3)``: the mask
    folds into an additive one, attention runs as one ``nn.batch_attention`` with a bias per
    query row, and the output matches PyTorch."""
    torch = pytest.importorskip("torch")
    nnt = torch.nn

    class Block(nnt.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nnt.LayerNorm(32)
            self.c_attn, self.c_fc = nnt.Linear(32, 96), nnt.Linear(32, 64)
            self.register_buffer("causal", torch.tril(torch.ones(9, 9, dtype=torch.bool)))

        def forward(self, x):
            q, k, v = (t.view(1, 9, 4, 8).permute(0, 2, 1, 3)
                       for t in self.c_attn(self.ln(x)).split(32, dim=2))
            s = torch.matmul(q, k.transpose(-1, -2)) / 8 ** 0.5
            s = torch.where(self.causal, s, torch.finfo(torch.float32).min)
            a = torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3).reshape(1, 9, 32)
            u = self.c_fc(x + a)
            return 0.5 * u * (1.0 + torch.tanh(0.8 * (u + 0.044715 * torch.pow(u, 3.0))))

    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(1, 9, 32)
    _attention_kernel_matches_torch(model, x)


_VISION = {
    "resnet50": (lambda tv: tv.models.resnet50(weights=None), 64),
    "mobilenet_v2": (lambda tv: tv.models.mobilenet_v2(weights=None), 64),
    "efficientnet_b0": (lambda tv: tv.models.efficientnet_b0(weights=None), 64),
    "mobilenet_v3_small": (lambda tv: tv.models.mobilenet_v3_small(weights=None), 64),
    "squeezenet1_0": (lambda tv: tv.models.squeezenet1_0(weights=None), 64),
    "densenet121": (lambda tv: tv.models.densenet121(weights=None), 64),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_VISION))
def test_torchvision_classifier_matches_pytorch(name: str) -> None:
    tv = _torchvision()
    make, size = _VISION[name]
    import torch

    torch.manual_seed(0)
    _against_torch(make(tv), (1, 3, size, size))


@pytest.mark.slow
def test_torchvision_small_vit_matches_pytorch() -> None:
    tv = _torchvision()
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                            hidden_dim=16, mlp_dim=32, num_classes=10)
    torch.nn.init.normal_(vit.heads.head.weight)  # torchvision zero-initialises the head
    assert tv is not None
    mod = _against_torch(vit, (1, 3, 32, 32))
    assert "nn.layer_norm" in {c.op for c in mod.calls()}
