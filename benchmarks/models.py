"""The networks of ``benchmarks/inference.py``: the zoo's, the seed layer, or an ONNX file.

A model name ending in ``.onnx`` is the path of a user's model file, imported with
``relay.frontend.from_onnx`` at the static input shape the file declares; its display name is
the file's stem. The peers load that file itself (:func:`onnx_file`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from templtune import graph  # noqa: E402

MODELS = ("resnet-18", "resnet-50", "mobilenet", "conv2d-seed")


def onnx_file(name: str) -> Path | None:
    """The ONNX file that model ``name`` names (absolute, so a spawned child finds it too);
    None for a zoo model."""
    return Path(name).resolve() if name.endswith(".onnx") else None


def display_name(name: str) -> str:
    """The model's name in the report: a file's stem, or the zoo name."""
    path = onnx_file(name)
    return path.stem if path is not None else name


def seed_layer(seed: int = 0) -> tuple[graph.Function, dict[str, np.ndarray]]:
    """conv2d 1x512x7x7 -> 512 3x3, pad 1 (the seed document's layer), as a network."""
    from templtune.graph import nn
    from templtune.graph.ir import Function

    data = nn.var("data", (1, 512, 7, 7))
    weight = nn.var("weight", (512, 512, 3, 3))
    body = nn.conv2d(data, weight, padding=(1, 1))
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((512, 512, 3, 3)) * np.sqrt(2 / (512 * 9))).astype("float32")
    return Function((data, weight), body, name="conv2d_seed"), {"weight": w}


def onnx_input(model: Any, path: Path) -> tuple[str, tuple[int, ...]]:
    """The name and static shape of the model's one input (float32, or int32 / int64 token
    ids)."""
    from onnx import TensorProto

    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise ValueError(f"{path}: one input expected, the model has "
                         f"{[i.name for i in inputs]}")
    inp = inputs[0]
    t = inp.type.tensor_type
    if t.elem_type not in (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32):
        raise ValueError(f"{path}: input {inp.name!r} is of ONNX type "
                         f"{TensorProto.DataType.Name(t.elem_type)}; only float32, int32 and "
                         "int64 inputs are fed")
    dims: list[int | str] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                             for d in t.shape.dim]
    if any(not isinstance(d, int) or d <= 0 for d in dims):
        raise ValueError(f"{path}: input {inp.name!r} has symbolic dimensions {dims}; export "
                         "the model with a static shape, batch 1 (torch.onnx.export without "
                         "dynamic_axes or dynamic_shapes)")
    return inp.name, tuple(int(d) for d in dims)


def load_model(name: str) -> tuple[graph.Function, dict[str, np.ndarray]]:
    """The benchmark's network ``name`` and its params."""
    from templtune.graph.ir import Call, Function

    path = onnx_file(name)
    if path is not None:
        import onnx

        from templtune.relay import frontend

        model = onnx.load(str(path))  # with its external data, if any
        inp, shape = onnx_input(model, path)
        return frontend.from_onnx(model, {inp: shape})
    if name == "conv2d-seed":
        return seed_layer()
    net, params, _, _ = graph.testing.get_network(name, 1, "NCHW")
    logits = net.body.args[0] if net.body.op == "nn.softmax" else None
    if isinstance(logits, Call):  # compare logits: see inference.py's module doc
        net = Function(net.params, logits, net.name)
    return net, params


def network_flops(net: graph.Function) -> float:
    """2 x multiply-adds of the network's convolutions, dense layers and batched matmuls."""
    total = 0.0
    for c in net.calls():
        if c.op == "nn.conv2d":
            # NCHW output, OIHW weight (I: input channels per group, so grouped convs too)
            w = c.args[1].shape
            total += 2.0 * np.prod(c.shape) * w[1] * w[2] * w[3]
        elif c.op == "nn.dense":  # N-D data [..., K]
            total += 2.0 * np.prod(c.shape) * c.args[0].shape[-1]
        elif c.op == "nn.batch_matmul":  # x [B, M, K], or [B, K, M] with transpose_a
            total += 2.0 * np.prod(c.shape) * c.args[0].shape[
                -2 if c.attr("transpose_a", False) else -1]
    return total


def export_onnx(model: Any, x: Any, out: Path, output_name: str) -> int:
    """Write torch ``model`` (called on ``x``, input ``"x"``) to ``out`` with the
    TorchScript-based exporter at opset 17, as the benchmark models are; returns its
    parameter count."""
    import warnings

    import torch

    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter, on purpose
        torch.onnx.export(model, (x,), str(out), input_names=["x"], output_names=[output_name],
                          opset_version=17, dynamo=False)
    return int(sum(p.numel() for p in model.parameters()))


def export_tokens(build: Any, tokens: int, hidden: int, out: Path, output_name: str,
                  vocab: int = 0) -> int:
    """Seed torch with 0, make the model (``build()``) and write it to ``out`` as
    :func:`export_onnx` does, on a ``(1, tokens, hidden)`` standard-normal input (a transformer
    past its embeddings), or with ``vocab`` on ``(1, tokens)`` int64 token ids below it;
    returns its parameter count."""
    import torch

    torch.manual_seed(0)
    model = build()
    x = torch.randint(0, vocab, (1, tokens)) if vocab else torch.randn(1, tokens, hidden)
    return export_onnx(model, x, out, output_name)


def token_parser(doc: str, layers: int, layers_help: str, tokens_help: str = "sequence length"
                 ) -> Any:
    """The command line of a transformer writer (``bert_onnx.py`` ...): ``--tokens``,
    ``--layers`` (default ``layers``) and ``--out``; :func:`parse_tokens` reads it."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128, help=tokens_help)
    ap.add_argument("--layers", type=int, default=layers, help=layers_help)
    ap.add_argument("--out", default=None, help="the ONNX file (default: under /tmp, named by "
                                                "the model and its tokens)")
    return ap


def parse_tokens(ap: Any, argv: list[str] | None, max_tokens: int | None = None) -> Any:
    """``ap``'s arguments, with ``--layers >= 1`` and ``1 <= --tokens (<= max_tokens)``
    enforced."""
    a = ap.parse_args(argv)
    if a.layers < 1 or a.tokens < 1 or (max_tokens is not None and a.tokens > max_tokens):
        ap.error("need --layers >= 1 and --tokens >= 1"
                 + (f" and --tokens <= {max_tokens}" if max_tokens is not None else ""))
    return a
