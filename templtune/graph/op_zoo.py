"""Operators the larger zoo networks need: ``concatenate`` (SqueezeNet, Inception, DenseNet) and
inference ``nn.batch_norm`` (DenseNet's pre-activation blocks, where it cannot be folded into a
convolution). Registered into :data:`templtune.graph.op.OPS` on import.

``concatenate`` is an ANCHOR here rather than Relay's injective: it starts its own group, so a
template's output stage never sees a multi-input follower, and the element-wise ops after it
(DenseNet's batch norm and relu) join that group, so the concatenation is never written out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import te
from templtune.topi.utils import get_const_int

from .ir import TensorType
from .op import ANCHOR, INJECTIVE, _register


def _axis(a: dict[str, Any], ndim: int) -> int:
    axis = int(a["axis"])
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for rank {ndim}")
    return axis % ndim


def _concat_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    ndim = len(t[0].shape)
    axis = _axis(a, ndim)
    for x in t[1:]:
        if len(x.shape) != ndim or any(x.shape[i] != t[0].shape[i] for i in range(ndim)
                                       if i != axis):
            raise ValueError(f"shapes {[x.shape for x in t]} differ off axis {axis}")
    out = list(t[0].shape)
    out[axis] = sum(x.shape[axis] for x in t)
    return tuple(out)


def _concat_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    ndim = len(x[0].shape)
    axis = _axis(a, ndim)
    sizes = [get_const_int(t.shape[axis]) for t in x]
    starts = [sum(sizes[:k]) for k in range(len(x))]
    shape: list[Any] = list(x[0].shape)
    shape[axis] = sum(sizes)

    def read(i: tuple[Any, ...], k: int) -> Any:
        idx = list(i)
        idx[axis] = i[axis] - starts[k]
        return x[k][tuple(idx)]

    def pick(i: tuple[Any, ...], lo: int, hi: int) -> Any:
        # NOTE: a balanced tree of lazy selects (a branch's out-of-range read never runs): code
        # generation of nested guarded selects grows exponentially with their depth, and
        # DenseNet concatenates dozens of inputs.
        if hi - lo == 1:
            return read(i, lo)
        mid = (lo + hi) // 2
        return te.if_then_else(i[axis] < starts[mid], pick(i, lo, mid), pick(i, mid, hi))

    def body(*i: Any) -> Any:
        return pick(tuple(i), 0, len(x))

    return te.compute(tuple(shape), body, name="T_concat", tag="injective")


_register("concatenate", ANCHOR, _concat_infer, _concat_compute,
          lambda x, a: np.concatenate(x, axis=int(a["axis"])))


def _bn_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    axis = _axis(a, len(t[0].shape))
    c = t[0].shape[axis]
    if any(p.shape != (c,) for p in t[1:]):
        raise ValueError(f"gamma/beta/mean/var must have shape ({c},), got "
                         f"{[p.shape for p in t[1:]]}")
    return t[0].shape


def _bn_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, gamma, beta, mean, var = x
    axis = _axis(a, len(data.shape))
    eps = te.const(float(a["epsilon"]), data.dtype)

    def body(*i: Any) -> Any:
        c = i[axis]
        return (data[i] - mean[c]) * gamma[c] / te.sqrt(var[c] + eps) + beta[c]

    return te.compute(data.shape, body, name="T_batch_norm", tag="elemwise")


def _bn_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data, gamma, beta, mean, var = x
    shape = [1] * data.ndim
    shape[_axis(a, data.ndim)] = -1
    r = [v.reshape(shape) for v in (gamma, beta, mean, var)]
    return (data - r[2]) * r[0] / np.sqrt(r[3] + np.float32(a["epsilon"])) + r[1]


_register("nn.batch_norm", INJECTIVE, _bn_infer, _bn_compute, _bn_ref)
