"""The ONNX operator handlers of :mod:`.onnx` (one ``op_<Type>`` method each)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Var
from ..op import GraphError, make_call
from ..ops.elemwise import binary, unary, where
from ..ops.typed import cast


def _same_pads(a: dict[str, Any], size: tuple[int, ...], k: tuple[int, ...],
               s: tuple[int, ...]) -> list[int]:
    """ONNX ``auto_pad`` as explicit ``[begins..., ends...]``."""
    mode = a.get("auto_pad", "NOTSET")
    nd = len(k)
    if mode in ("NOTSET", ""):
        return list(a.get("pads", [0] * 2 * nd))
    if mode == "VALID":
        return [0] * 2 * nd
    begins, ends = [], []
    for d, kk, ss in zip(size, k, s):
        total = max((math.ceil(d / ss) - 1) * ss + kk - d, 0)
        lo = total // 2 if mode == "SAME_UPPER" else total - total // 2
        begins.append(lo)
        ends.append(total - lo)
    return begins + ends


class OnnxOps:
    """Handlers: each takes ``(node, attrs)`` and returns the value (or values) of the node;
    the importer's state (``env``, ``consts``, ``params`` ...) is set by its subclass."""

    dtype: str
    opset: int
    env: dict[str, Expr]
    consts: dict[str, np.ndarray]
    params: dict[str, np.ndarray]
    vars: list[Var]
    uses: dict[str, int]
    const_vars: dict[str, Var]

    # ---- values ------------------------------------------------------------------------------
    def const(self, name: str, node: Any) -> np.ndarray:
        if name not in self.consts:
            raise GraphError(f"{node.op_type} {node.name!r}: input {name!r} must be a constant "
                             f"(initializer)")
        return self.consts[name]

    def param(self, name: str, value: np.ndarray) -> Var:
        key = name.replace("/", "_").replace(".", "_").replace(":", "_") or "const"
        while key in self.params:
            key += "_"
        arr = np.ascontiguousarray(np.asarray(value).astype(self.dtype))
        v = nn.var(key, arr.shape, self.dtype)
        self.params[key] = arr
        self.vars.append(v)
        return v

    def x(self, node: Any, k: int = 0) -> Expr:
        """Input ``k`` of ``node`` as a network value (a constant becomes a parameter, once)."""
        name = node.input[k]
        if name in self.env:
            return self.env[name]
        if name in self.consts:
            if name not in self.const_vars:
                value = self.consts[name]
                self.const_vars[name] = self.param(name, value.reshape(value.shape or (1,)))
            return self.const_vars[name]
        raise GraphError(f"{node.op_type} {node.name!r}: unknown input {name!r}")

    def has(self, node: Any, k: int) -> bool:
        return len(node.input) > k and bool(node.input[k])

    def fail(self, node: Any, why: str) -> GraphError:
        return GraphError(f"{node.op_type} {node.name!r}: {why}")

    # ---- convolution, normalisation, pooling --------------------------------------------------
    def op_Conv(self, node: Any, a: dict[str, Any]) -> Expr:
        w = self.const(node.input[1], node)
        if w.ndim != 4 or any(d != 1 for d in a.get("dilations", [1, 1])):
            raise self.fail(node, "only 2-D, dilation-1 convolutions are supported")
        data = self.x(node)
        strides = tuple(a.get("strides", (1, 1)))
        p = _same_pads(a, data.shape[2:], w.shape[2:], strides)
        pad = (p[0], p[1], p[2], p[3])  # ONNX: h_begin, w_begin, h_end, w_end
        group, c = int(a.get("group", 1)), data.shape[1]
        bias = self.const(node.input[2], node) if self.has(node, 2) else None
        if c % group or w.shape[0] % group or w.shape[1] * group != c:
            raise self.fail(node, f"kernel {w.shape} does not fit {c} channels in {group} "
                                  "groups")
        y = nn.conv2d(data, self.param(node.input[1], w), strides=strides, padding=pad,
                      groups=group)
        if bias is not None:
            y = nn.bias_add(y, self.param(node.input[2], bias))
        return y

    def _slice(self, x: Expr, axis: int, begin: int, end: int, step: int = 1) -> Call:
        nd = len(x.shape)
        b, e, s = [0] * nd, list(x.shape), [1] * nd
        b[axis], e[axis], s[axis] = begin, end, step
        return make_call("strided_slice", [x], begin=tuple(b), end=tuple(e), strides=tuple(s))

    def op_BatchNormalization(self, node: Any, a: dict[str, Any]) -> Expr:
        src = self.x(node)
        scale, shift, mean, var = (self.const(n, node) for n in node.input[1:5])
        s = scale / np.sqrt(var + float(a.get("epsilon", 1e-5)))
        conv, bias = src, None
        if isinstance(src, Call) and src.op == "nn.bias_add":
            conv, bias = src.args[0], src.args[1]
        if not (isinstance(conv, Call) and conv.op == "nn.conv2d"
                and isinstance(conv.args[1], Var) and self.uses.get(node.input[0], 0) == 1):
            # NOTE: not after a Conv (DenseNet normalises concatenations): a per-channel affine
            shape = (-1,) + (1,) * (len(src.shape) - 2)
            y = binary("multiply", src, self.param(f"{node.name}_scale", s.reshape(shape)))
            return nn.bias_add(y, self.param(f"{node.name}_shift", shift - mean * s))
        wvar = conv.args[1]
        self.params[wvar.name] = (self.params[wvar.name] * s[:, None, None, None]).astype(
            self.dtype)
        b0: Any = 0.0
        if isinstance(bias, Var):  # the Conv's own bias is folded too: drop its parameter
            b0 = self.params.pop(bias.name)
            self.vars = [v for v in self.vars if v is not bias]
        b = self.param(f"{node.name or node.output[0]}_folded_bias", (b0 - mean) * s + shift)
        return nn.bias_add(conv, b)

    def op_LayerNormalization(self, node: Any, a: dict[str, Any]) -> Expr:
        data = self.x(node)
        axis = int(a.get("axis", -1)) % len(data.shape)
        inner = data.shape[axis:]
        gamma = np.broadcast_to(self.const(node.input[1], node), inner)
        beta = (np.broadcast_to(self.const(node.input[2], node), inner) if self.has(node, 2)
                else np.zeros(inner))
        return make_call("nn.layer_norm", [data, self.param(node.input[1], gamma),
                                           self.param(f"{node.input[1]}_bias", beta)],
                         axis=axis, epsilon=float(a.get("epsilon", 1e-5)))

    def _pool(self, node: Any, a: dict[str, Any], kind: str) -> Expr:
        data = self.x(node)
        if len(data.shape) != 4 or any(d != 1 for d in a.get("dilations", [1, 1])):
            raise self.fail(node, "only 2-D, dilation-1 pooling is supported")
        k = tuple(a["kernel_shape"])
        s = tuple(a.get("strides", (1, 1)))
        p = _same_pads(a, data.shape[2:], k, s)
        include = kind == "avg" and a.get("count_include_pad", 0) and any(p)
        if a.get("ceil_mode", 0):
            if include:
                raise self.fail(node, "ceil_mode with count_include_pad=1 is not supported")
            for d in range(2):  # extra end padding, excluded from the window as ONNX does
                size = data.shape[2 + d] + p[d] + p[2 + d]
                out = -(-(size - k[d]) // s[d]) + 1
                if (out - 1) * s[d] >= data.shape[2 + d] + p[d]:
                    out -= 1
                p[2 + d] += max((out - 1) * s[d] + k[d] - size, 0)
        if include:  # the zeros count: pad them in, then pool without padding
            data = make_call("nn.pad", [data], pad_before=(0, 0, p[0], p[1]),
                             pad_after=(0, 0, p[2], p[3]), pad_value=0.0)
            p = [0, 0, 0, 0]
        f = nn.max_pool2d if kind == "max" else nn.avg_pool2d
        return f(data, k, s, (p[0], p[1], p[2], p[3]))

    def op_MaxPool(self, node: Any, a: dict[str, Any]) -> Expr:
        if len(node.output) > 1 and node.output[1]:
            raise self.fail(node, "the Indices output is not supported")
        return self._pool(node, a, "max")

    def op_AveragePool(self, node: Any, a: dict[str, Any]) -> Expr:
        return self._pool(node, a, "avg")

    def op_GlobalAveragePool(self, node: Any, a: dict[str, Any]) -> Expr:
        return nn.global_avg_pool2d(self.x(node))

    def op_GlobalMaxPool(self, node: Any, a: dict[str, Any]) -> Expr:
        return make_call("nn.global_max_pool2d", [self.x(node)])

    # ---- element-wise ------------------------------------------------------------------------
    def op_Relu(self, node: Any, a: dict[str, Any]) -> Expr:
        return nn.relu(self.x(node))

    def _unary(op: str, **defaults: float) -> Any:  # type: ignore[misc]
        def handler(self: OnnxOps, node: Any, a: dict[str, Any]) -> Expr:
            return unary(op, self.x(node), **{k: float(a.get(k, v)) for k, v in
                                              defaults.items()})

        return handler

    op_Sigmoid = _unary("sigmoid")
    op_Tanh = _unary("tanh")
    op_Exp = _unary("exp")
    op_Log = _unary("log")
    op_Sqrt = _unary("sqrt")
    op_Abs = _unary("abs")
    op_Neg = _unary("negative")
    op_Reciprocal = _unary("reciprocal")
    op_Erf = _unary("erf")
    op_LeakyRelu = _unary("nn.leaky_relu", alpha=0.01)
    op_HardSigmoid = _unary("nn.hard_sigmoid", alpha=0.2, beta=0.5)
    op_HardSwish = _unary("nn.hard_swish")

    def op_Clip(self, node: Any, a: dict[str, Any]) -> Expr:
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
        if self.has(node, 1):
            lo = float(self.const(node.input[1], node))
        if self.has(node, 2):
            hi = float(self.const(node.input[2], node))
        return nn.clip(self.x(node), lo, hi)

    def op_Add(self, node: Any, a: dict[str, Any]) -> Expr:
        for k in (0, 1):  # x + a bias along one axis: bias_add (what dense/conv groups expect)
            name, other = node.input[k], node.input[1 - k]
            if name not in self.consts or other in self.consts:
                continue
            xv, b = self.x(node, 1 - k), self.consts[name]
            nd = len(xv.shape)
            axes = [d for d in range(b.ndim) if b.shape[d] != 1]
            if b.ndim <= nd and len(axes) == 1:
                axis = nd - b.ndim + axes[0]
                if xv.shape[axis] == b.shape[axes[0]]:
                    return nn.bias_add(xv, self.param(name, b.reshape(-1)), axis=axis - nd)
        return binary("add", self.x(node, 0), self.x(node, 1))

    def _binary(op: str) -> Any:  # type: ignore[misc]
        def handler(self: OnnxOps, node: Any, a: dict[str, Any]) -> Expr:
            if len(node.input) != 2:
                raise self.fail(node, "only two inputs are supported")
            return binary(op, self.x(node, 0), self.x(node, 1))

        return handler

    op_Sub = _binary("subtract")
    op_Mul = _binary("multiply")
    op_Div = _binary("divide")
    op_Max = _binary("maximum")
    op_Min = _binary("minimum")

    def op_Pow(self, node: Any, a: dict[str, Any]) -> Expr:
        e = self.consts.get(node.input[1])
        # NOTE: small integer powers as products: a pow call per element does not vectorize
        # (x*x is exact; x*x*x, GPT-2's tanh GELU, is within 2 ulp of pow)
        if e is not None and e.size == 1 and float(e) in (2.0, 3.0):
            xv = self.x(node)
            sq = binary("multiply", xv, xv)
            return sq if float(e) == 2.0 else binary("multiply", sq, xv)
        return binary("power", self.x(node, 0), self.x(node, 1))

    def op_Where(self, node: Any, a: dict[str, Any]) -> Expr:
        # NOTE: a boolean constant condition (a causal mask) becomes a parameter of the
        # network's float dtype, 1 where true: the graph's where reads nonzero as true
        return where(self.x(node, 0), self.x(node, 1), self.x(node, 2))

    def op_Identity(self, node: Any, a: dict[str, Any]) -> Expr:
        return self.x(node)

    op_Dropout = op_Identity

    def dtype_of(self, elem_type: int, what: str) -> str:
        """The network dtype of an ONNX element type: every float type is the network's
        float dtype, int32 and int64 (token ids, attention masks) stay themselves."""
        from onnx import TensorProto

        if elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
            return self.dtype
        ints: dict[int, str] = {TensorProto.INT64: "int64", TensorProto.INT32: "int32"}
        if elem_type not in ints:
            raise GraphError(f"{what}: ONNX element type "
                             f"{TensorProto.DataType.Name(elem_type)} is not supported (float, "
                             f"int32 or int64)")
        return ints[elem_type]

    def op_Cast(self, node: Any, a: dict[str, Any]) -> Expr:
        x = self.x(node)
        to = self.dtype_of(int(a.get("to", 0)), f"Cast {node.name!r}")
        return x if to == x.type.dtype else cast(x, to)


# NOTE: the shape and tensor-layout handlers live in their own file; they join the class here.
from . import _onnx_shape  # noqa: E402

for _name in (
    "op_Concat",
    "op_Expand",
    "op_Flatten",
    "op_Gather",
    "op_Gemm",
    "op_MatMul",
    "op_Pad",
    "op_ReduceMax",
    "op_ReduceMean",
    "op_ReduceMin",
    "op_ReduceSum",
    "op_Reshape",
    "op_Resize",
    "op_Slice",
    "op_Softmax",
    "op_Split",
    "op_Squeeze",
    "op_Transpose",
    "op_Unsqueeze",
):
    setattr(OnnxOps, _name, getattr(_onnx_shape, _name))
