"""Import ONNX models (``relay.frontend.from_onnx``) into the network IR.

Covered: the operators that torchvision's classifiers (ResNet, MobileNetV2/V3, EfficientNet,
SqueezeNet, DenseNet) and small vision transformers export at opset 17 — convolutions (grouped,
depthwise), BatchNormalization (folded into the preceding Conv where it alone reads it), the
pools (``ceil_mode``, ``count_include_pad``), Gemm/MatMul (batched), broadcasting arithmetic,
activations (Sigmoid, HardSwish, Erf ...), Reshape/Transpose/Concat/Slice/Split/Gather/Pad,
Resize, ReduceMean, LayerNormalization and Softmax (see :mod:`._onnx_ops`). Inputs are float
(the network's dtype) or int32/int64, so a transformer exported from its token ids imports:
``Gather`` on run-time indices becomes ``take`` (the embedding lookup), ``Cast`` of its int
attention mask ``cast``. Initializers become parameters. Nodes whose inputs are all constant
(shape arithmetic: Shape, Gather, Concat ...) are evaluated at import time with
``onnx.reference``. A model with operators outside this set
fails with one :class:`GraphError` that lists every one of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function, Var, topo_order
from ..op import GraphError
from ._onnx_ops import OnnxOps

__all__ = ["from_onnx"]

# Shape needs only its input's (static) shape, so it folds even on an activation.
_SHAPE_OPS = ("Shape", "Size")


def _attrs(node: Any) -> dict[str, Any]:
    import onnx

    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


class _Importer(OnnxOps):
    def __init__(self, model: Any, shape: dict[str, Any] | None, dtype: str) -> None:
        self.g = model.graph
        self.dtype = dtype
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          17)
        self.shape = dict(shape or {})
        self.env: dict[str, Expr] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.params: dict[str, np.ndarray] = {}
        self.vars: list[Var] = []
        self.uses: dict[str, int] = {}
        self.const_vars: dict[str, Var] = {}

    # ---- driver ------------------------------------------------------------------------------
    def _check_supported(self) -> None:
        """Raise one error naming every operator that neither folds nor has a handler."""
        known = set(self.consts) | {i.name for i in self.g.input}
        const = set(self.consts)
        missing: dict[str, list[str]] = {}
        for node in self.g.node:
            ins = [i for i in node.input if i]
            if node.op_type in _SHAPE_OPS or all(i in const for i in ins):
                const.update(node.output)
            elif not hasattr(self, f"op_{node.op_type}") or node.domain not in ("", "ai.onnx"):
                missing.setdefault(node.op_type, []).append(node.name or node.output[0])
            known.update(node.output)
        if missing:
            parts = [f"{op} (node {names[0]!r})" if len(names) == 1 else
                     f"{op} ({len(names)} nodes, first {names[0]!r})"
                     for op, names in missing.items()]
            raise GraphError(f"the model uses {len(missing)} ONNX operator(s) that the templtune "
                             f"importer does not support: {', '.join(parts)}")

    def _fold(self, node: Any, a: dict[str, Any]) -> None:
        from onnx.reference import ReferenceEvaluator

        if node.op_type in _SHAPE_OPS:
            name = node.input[0]
            shp = self.consts[name].shape if name in self.consts else self.env[name].shape
            if node.op_type == "Size":
                self.consts[node.output[0]] = np.array(int(np.prod(shp)), np.int64)
                return
            start, end = a.get("start", 0), a.get("end", None)
            self.consts[node.output[0]] = np.array(shp, np.int64)[start:end]
            return
        feeds = {i: self.consts[i] for i in node.input if i}
        outs = ReferenceEvaluator(node, opsets={"": self.opset}).run(None, feeds)
        for name, v in zip(node.output, outs):
            self.consts[name] = np.asarray(v)

    def run(self) -> tuple[Function, dict[str, np.ndarray]]:
        from onnx import numpy_helper

        for init in self.g.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
        for node in self.g.node:
            for i in node.input:
                self.uses[i] = self.uses.get(i, 0) + 1
        self._check_supported()
        inputs = []
        for inp in self.g.input:
            if inp.name in self.consts:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None
                    for d in inp.type.tensor_type.shape.dim]
            shape = self.shape.get(inp.name, dims)
            if shape is None or any(d is None or d <= 0 for d in shape):
                raise GraphError(f"input {inp.name!r} has dynamic shape {dims}; pass "
                                 f"shape={{{inp.name!r}: (...)}}")
            v = nn.var(inp.name, tuple(int(d) for d in shape),
                       self.dtype_of(inp.type.tensor_type.elem_type, f"input {inp.name!r}"))
            self.env[inp.name] = v
            inputs.append(v)
        for node in self.g.node:
            a = _attrs(node)
            ins = [i for i in node.input if i]
            if node.op_type in _SHAPE_OPS or all(i in self.consts for i in ins):
                self._fold(node, a)
                continue
            out = getattr(self, f"op_{node.op_type}")(node, a)
            for name, v in zip(node.output, out if isinstance(out, list) else [out]):
                self.env[name] = v
        if len(self.g.output) != 1:
            raise GraphError(f"only single-output models are supported "
                             f"({len(self.g.output)} outputs)")
        body = self.env.get(self.g.output[0].name)
        if not isinstance(body, Call):
            raise GraphError("the model's output is not computed by any operator")
        used = {id(v) for c in topo_order(body) for v in c.args}
        params = {v.name: self.params[v.name] for v in self.vars if id(v) in used}
        return Function((*inputs, *(v for v in self.vars if v.name in params)), body), params


def from_onnx(model: Any, shape: dict[str, Any] | None = None, dtype: str = "float32",
              opset: int | None = None, freeze_params: bool = True
              ) -> tuple[Function, dict[str, np.ndarray]]:
    """Convert an ONNX model (a ``ModelProto`` or a path) to ``(network, params)``.

    Parameters
    ----------
    model : onnx.ModelProto or str
    shape : dict, optional
        Input name -> shape, for inputs whose shape is dynamic in the model.
    dtype : str
        Type of the inputs and parameters (float32).

    Raises
    ------
    GraphError
        Listing every unsupported operator of the model, or naming the node that cannot be
        converted (an unsupported attribute, a dynamic shape).
    """
    try:
        import onnx
    except ImportError as exc:
        raise ImportError("from_onnx needs the onnx package (pip install onnx)") from exc
    if isinstance(model, str):
        model = onnx.load(model)
    return _Importer(model, shape, dtype).run()
