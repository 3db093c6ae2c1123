"""Import ONNX models (``relay.frontend.from_onnx``) into the network IR.

Covered: the operators of image classifiers — Conv (incl. depthwise), BatchNormalization (folded
into the preceding Conv, as an inference compiler does), Relu, Clip, Add, MaxPool, AveragePool,
GlobalAveragePool, Flatten / Reshape to 2-D, Gemm, MatMul with a constant weight, Softmax,
Identity and Dropout. Initializers become parameters. Anything else is a :class:`GraphError`
that names the operator and the node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function, Var
from ..op import GraphError


def _attrs(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _padding(node: Any, a: dict[str, Any], what: str) -> tuple[int, int, int, int]:
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise GraphError(f"{what} {node.name!r}: auto_pad={a['auto_pad']!r} is not supported "
                         f"(export with explicit pads)")
    p = list(a.get("pads", [0, 0, 0, 0]))
    if len(p) != 4:
        raise GraphError(f"{what} {node.name!r}: only 2-D pads are supported, got {p}")
    return (p[0], p[1], p[2], p[3])  # ONNX: h_begin, w_begin, h_end, w_end


class _Importer:
    def __init__(self, model: Any, shape: dict[str, Any] | None, dtype: str) -> None:
        self.g = model.graph
        self.dtype = dtype
        self.shape = dict(shape or {})
        self.env: dict[str, Expr] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.params: dict[str, np.ndarray] = {}
        self.vars: list[Var] = []
        self.uses: dict[str, int] = {}

    def const(self, name: str, node: Any) -> np.ndarray:
        if name not in self.consts:
            raise GraphError(f"{node.op_type} {node.name!r}: input {name!r} must be a constant "
                             f"(initializer)")
        return self.consts[name]

    def param(self, name: str, value: np.ndarray) -> Var:
        key = name.replace("/", "_").replace(".", "_").replace(":", "_")
        while key in self.params:
            key += "_"
        arr = np.ascontiguousarray(value.astype(self.dtype))
        v = nn.var(key, arr.shape, self.dtype)
        self.params[key] = arr
        self.vars.append(v)
        return v

    def run(self) -> tuple[Function, dict[str, np.ndarray]]:
        from onnx import numpy_helper

        for init in self.g.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
        for node in self.g.node:
            if node.op_type == "Constant":
                self.consts[node.output[0]] = numpy_helper.to_array(_attrs(node)["value"])
            for i in node.input:
                self.uses[i] = self.uses.get(i, 0) + 1
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
            v = nn.var(inp.name, tuple(int(d) for d in shape), self.dtype)
            self.env[inp.name] = v
            inputs.append(v)
        for node in self.g.node:
            if node.op_type == "Constant":
                continue
            handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None:
                raise GraphError(f"ONNX operator {node.op_type} (node {node.name!r}) is not "
                                 f"supported by the templtune importer")
            self.env[node.output[0]] = handler(node, _attrs(node))
        if len(self.g.output) != 1:
            raise GraphError(f"only single-output models are supported "
                             f"({len(self.g.output)} outputs)")
        body = self.env[self.g.output[0].name]
        if not isinstance(body, Call):
            raise GraphError("the model's output is not computed by any operator")
        return Function((*inputs, *self.vars), body), self.params

    def x(self, node: Any, k: int = 0) -> Expr:
        name = node.input[k]
        if name not in self.env:
            if name in self.consts:
                raise GraphError(f"{node.op_type} {node.name!r}: constant input {name!r} where "
                                 f"an activation is expected")
            raise GraphError(f"{node.op_type} {node.name!r}: unknown input {name!r}")
        return self.env[name]

    # ---- operators -----------------------------------------------------------------------------
    def op_Conv(self, node: Any, a: dict[str, Any]) -> Call:
        w = self.const(node.input[1], node)
        if len(w.shape) != 4 or any(d != 1 for d in a.get("dilations", [1, 1])):
            raise GraphError(f"Conv {node.name!r}: only 2-D, dilation-1 convolutions")
        group = int(a.get("group", 1))
        data = self.x(node)
        y = nn.conv2d(data, self.param(node.input[1], w), strides=tuple(a.get("strides", (1, 1))),
                      padding=_padding(node, a, "Conv"), groups=group)
        if len(node.input) > 2 and node.input[2]:
            y = nn.bias_add(y, self.param(node.input[2], self.const(node.input[2], node)))
        return y

    def op_BatchNormalization(self, node: Any, a: dict[str, Any]) -> Call:
        src = self.x(node)
        scale, shift, mean, var = (self.const(n, node) for n in node.input[1:5])
        s = scale / np.sqrt(var + float(a.get("epsilon", 1e-5)))
        conv, bias = src, None
        if isinstance(src, Call) and src.op == "nn.bias_add":
            conv, bias = src.args[0], src.args[1]
        if not (isinstance(conv, Call) and conv.op == "nn.conv2d"
                and self.uses.get(node.input[0], 0) == 1):
            raise GraphError(f"BatchNormalization {node.name!r} must follow a Conv whose output "
                             f"it alone uses (it is folded into the Conv)")
        wvar = conv.args[1]
        assert isinstance(wvar, Var)
        self.params[wvar.name] = (self.params[wvar.name] * s[:, None, None, None]).astype(
            self.dtype)
        b0: Any = 0.0
        if isinstance(bias, Var):  # the Conv's own bias is folded too: drop its parameter
            b0 = self.params.pop(bias.name)
            self.vars = [v for v in self.vars if v is not bias]
        b = self.param(f"{node.name or node.output[0]}_folded_bias", (b0 - mean) * s + shift)
        return nn.bias_add(conv, b)

    def op_Relu(self, node: Any, a: dict[str, Any]) -> Call:
        return nn.relu(self.x(node))

    def op_Clip(self, node: Any, a: dict[str, Any]) -> Call:
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
        if len(node.input) > 1 and node.input[1]:
            lo = float(self.const(node.input[1], node))
        if len(node.input) > 2 and node.input[2]:
            hi = float(self.const(node.input[2], node))
        return nn.clip(self.x(node), lo, hi)

    def op_Add(self, node: Any, a: dict[str, Any]) -> Call:
        if node.input[1] in self.consts:  # x + bias vector (e.g. after MatMul)
            b = self.const(node.input[1], node).reshape(-1)
            return nn.bias_add(self.x(node), self.param(node.input[1], b), axis=-1)
        return nn.add(self.x(node, 0), self.x(node, 1))

    def _pool(self, node: Any, a: dict[str, Any], kind: str) -> Call:
        if a.get("ceil_mode", 0):
            raise GraphError(f"{node.op_type} {node.name!r}: ceil_mode is not supported")
        if kind == "avg" and a.get("count_include_pad", 0) and any(_padding(node, a, "pool")):
            raise GraphError(f"AveragePool {node.name!r}: count_include_pad=1 with padding is "
                             f"not supported")
        f = nn.max_pool2d if kind == "max" else nn.avg_pool2d
        return f(self.x(node), tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))),
                 _padding(node, a, node.op_type))

    def op_MaxPool(self, node: Any, a: dict[str, Any]) -> Call:
        return self._pool(node, a, "max")

    def op_AveragePool(self, node: Any, a: dict[str, Any]) -> Call:
        return self._pool(node, a, "avg")

    def op_GlobalAveragePool(self, node: Any, a: dict[str, Any]) -> Call:
        return nn.global_avg_pool2d(self.x(node))

    def op_Flatten(self, node: Any, a: dict[str, Any]) -> Call:
        if int(a.get("axis", 1)) != 1:
            raise GraphError(f"Flatten {node.name!r}: only axis=1 is supported")
        return nn.batch_flatten(self.x(node))

    def op_Reshape(self, node: Any, a: dict[str, Any]) -> Call:
        x = self.x(node)
        target = [int(d) for d in self.const(node.input[1], node)]
        if len(target) == 2 and target[0] in (x.shape[0], 0, -1) and \
                target[1] in (-1, int(np.prod(x.shape[1:]))):
            return nn.batch_flatten(x)
        raise GraphError(f"Reshape {node.name!r}: only flattening to (batch, -1) is supported, "
                         f"got {target}")

    def op_Gemm(self, node: Any, a: dict[str, Any]) -> Call:
        if a.get("transA", 0) or float(a.get("alpha", 1.0)) != 1.0 \
                or float(a.get("beta", 1.0)) != 1.0:
            raise GraphError(f"Gemm {node.name!r}: only alpha=beta=1 and transA=0 are supported")
        w = self.const(node.input[1], node)
        w = w if a.get("transB", 0) else w.T
        y = nn.dense(self.x(node), self.param(node.input[1], w))
        if len(node.input) > 2 and node.input[2]:
            b = self.const(node.input[2], node).reshape(-1)
            y = nn.bias_add(y, self.param(node.input[2], np.broadcast_to(b, (w.shape[0],))),
                            axis=-1)
        return y

    def op_MatMul(self, node: Any, a: dict[str, Any]) -> Call:
        w = self.const(node.input[1], node)
        if w.ndim != 2:
            raise GraphError(f"MatMul {node.name!r}: the weight must be a 2-D constant")
        return nn.dense(self.x(node), self.param(node.input[1], w.T))

    def op_Softmax(self, node: Any, a: dict[str, Any]) -> Call:
        return nn.softmax(self.x(node), axis=int(a.get("axis", -1)))

    def op_Identity(self, node: Any, a: dict[str, Any]) -> Expr:
        return self.x(node)

    op_Dropout = op_Identity


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
    """
    try:
        import onnx
    except ImportError as exc:
        raise ImportError("from_onnx needs the onnx package (pip install onnx)") from exc
    if isinstance(model, str):
        model = onnx.load(model)
    return _Importer(model, shape, dtype).run()
