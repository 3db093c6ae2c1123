"""Element-wise network operators: unary math (``sigmoid``, ``erf``, ``nn.hard_swish`` ...),
numpy-broadcasting binaries (``subtract``, ``multiply``, ``divide``, ``power``, ``maximum``,
``minimum``) and ``where``, as ONNX models and Relay use them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from templtune import te, topi
from templtune.te.expr import PrimExpr

from ..ir import Call, Expr
from ..op import INJECTIVE, broadcast_infer, make_call, register_op

__all__ = ["unary", "binary", "where", "UNARY", "BINARY"]

def _hard_sigmoid(x: PrimExpr, alpha: float, beta: float) -> PrimExpr:
    v = x * te.const(alpha, x.dtype) + te.const(beta, x.dtype)
    return te.max(te.min(v, te.const(1.0, x.dtype)), te.const(0.0, x.dtype))


def _np_hard_sigmoid(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return np.clip(x * a["alpha"] + a["beta"], 0.0, 1.0)


_np_erf = np.vectorize(math.erf, otypes=[np.float64])

#: op name -> (te body of one element given the attrs, numpy reference)
UNARY: dict[str, tuple[Callable[[PrimExpr, dict[str, Any]], PrimExpr],
                       Callable[[np.ndarray, dict[str, Any]], np.ndarray]]] = {
    "sigmoid": (lambda x, a: te.sigmoid(x), lambda x, a: 1.0 / (1.0 + np.exp(-x))),
    "tanh": (lambda x, a: te.tanh(x), lambda x, a: np.tanh(x)),
    "exp": (lambda x, a: te.exp(x), lambda x, a: np.exp(x)),
    "log": (lambda x, a: te.log(x), lambda x, a: np.log(x)),
    "sqrt": (lambda x, a: te.sqrt(x), lambda x, a: np.sqrt(x)),
    "abs": (lambda x, a: te.abs(x), lambda x, a: np.abs(x)),
    "negative": (lambda x, a: -x, lambda x, a: -x),
    "reciprocal": (lambda x, a: te.const(1.0, x.dtype) / x, lambda x, a: 1.0 / x),
    "erf": (lambda x, a: te.erf(x), lambda x, a: _np_erf(x)),
    "nn.leaky_relu": (lambda x, a: te.select(x > te.const(0.0, x.dtype), x,
                                             x * te.const(a["alpha"], x.dtype)),
                      lambda x, a: np.where(x > 0, x, x * a["alpha"])),
    "nn.hard_sigmoid": (lambda x, a: _hard_sigmoid(x, a["alpha"], a["beta"]), _np_hard_sigmoid),
    "nn.hard_swish": (lambda x, a: x * _hard_sigmoid(x, 1.0 / 6.0, 0.5),
                      lambda x, a: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)),
}


def _unary_compute(name: str) -> Callable[[list[te.Tensor], dict[str, Any]], te.Tensor]:
    fn = UNARY[name][0]

    def compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
        return te.compute(x[0].shape, lambda *i: fn(x[0][i], a),
                          name="T_" + name.split(".")[-1], tag="elemwise")

    return compute


def _unary_reference(name: str) -> Callable[[list[np.ndarray], dict[str, Any]], np.ndarray]:
    fn = UNARY[name][1]
    return lambda x, a: fn(x[0].astype(np.float64), a).astype(x[0].dtype)


def unary(op: str, data: Expr, **attrs: Any) -> Call:
    """``op`` (a key of :data:`UNARY`) applied element-wise to ``data``."""
    return make_call(op, [data], **attrs)


def _at(t: te.Tensor, shape: tuple[int, ...], i: tuple[Any, ...]) -> PrimExpr:
    """The element of ``t`` that index ``i`` of the numpy broadcast ``shape`` reads."""
    off = len(shape) - len(t.shape)
    return t[tuple(0 if int(d) == 1 and shape[off + k] != 1 else i[off + k]
                   for k, d in enumerate(t.shape))]


def _power(x: te.Tensor, y: te.Tensor) -> te.Tensor:
    shape = tuple(int(d) for d in topi.broadcast.broadcast_shape(x.shape, y.shape))
    return te.compute(shape, lambda *i: te.power(_at(x, shape, i), _at(y, shape, i)),
                      name="T_power", tag="broadcast")


#: op name -> (te broadcast compute, numpy reference)
BINARY: dict[str, tuple[Callable[[te.Tensor, te.Tensor], te.Tensor],
                        Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "subtract": (topi.subtract, np.subtract),
    "multiply": (topi.multiply, np.multiply),
    "divide": (topi.divide, np.divide),
    "maximum": (topi.maximum, np.maximum),
    "minimum": (topi.minimum, np.minimum),
    "power": (_power, np.power),
}


def binary(op: str, lhs: Expr, rhs: Expr) -> Call:
    """``op`` (a key of :data:`BINARY`, or ``add``) of two values, numpy-broadcast."""
    return make_call(op, [lhs, rhs])


for _name in UNARY:
    register_op(_name, INJECTIVE, lambda t, a: t[0].shape, _unary_compute(_name),
                _unary_reference(_name))
for _name, (_te, _np) in BINARY.items():
    register_op(_name, INJECTIVE, broadcast_infer,
                (lambda f: lambda x, a: f(x[0], x[1]))(_te),
                (lambda f: lambda x, a: f(x[0], x[1]))(_np))


def _where_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    shape = np.broadcast_shapes(*(tuple(int(d) for d in t.shape) for t in x))
    zero = te.const(0.0, x[0].dtype)
    return te.compute(shape, lambda *i: te.select(_at(x[0], shape, i) != zero,
                                                  _at(x[1], shape, i), _at(x[2], shape, i)),
                      name="T_where", tag="broadcast")


def where(condition: Expr, x: Expr, y: Expr) -> Call:
    """``x`` where ``condition`` is nonzero, else ``y``, numpy-broadcast.

    Relay's ``where`` takes a boolean condition; here the condition has the values' dtype
    (networks hold no bool tensors) and is true where nonzero (NaN included, as numpy's).
    """
    return make_call("where", [condition, x, y])


register_op("where", INJECTIVE, broadcast_infer, _where_compute,
            lambda x, a: np.where(x[0] != 0, x[1], x[2]), builder=where)
