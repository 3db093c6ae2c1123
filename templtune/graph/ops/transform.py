"""Data-movement and normalisation operators of imported models: ``reshape``, ``transpose``,
``concatenate``, ``strided_slice``, ``nn.pad``, ``image.resize2d`` (injective), ``sum``,
``mean``, ``max``, ``min`` and ``nn.global_max_pool2d`` (reductions), ``nn.layer_norm`` (stands alone, like softmax)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from templtune import te, topi
from templtune.te.expr import PrimExpr

from ..ir import TensorType
from ..op import ANCHOR, INJECTIVE, OPAQUE, register_op


# ---- reshape / transpose / concatenate / slice / pad ---------------------------------------------
def _reshape_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    new = tuple(a["newshape"])
    if math.prod(new) != math.prod(t[0].shape):
        raise ValueError(f"cannot reshape {t[0].shape} to {new}")
    return new


register_op("reshape", INJECTIVE, _reshape_infer,
            lambda x, a: topi.reshape(x[0], a["newshape"]),
            lambda x, a: x[0].reshape(a["newshape"]))


def _transpose_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    axes = tuple(a["axes"])
    if sorted(axes) != list(range(len(t[0].shape))):
        raise ValueError(f"{axes} is not a permutation of {len(t[0].shape)} axes")
    return tuple(t[0].shape[k] for k in axes)


register_op("transpose", INJECTIVE, _transpose_infer,
            lambda x, a: topi.transpose(x[0], a["axes"]),
            lambda x, a: np.ascontiguousarray(x[0].transpose(a["axes"])))


# NOTE: ``concatenate`` is registered by graph/op_zoo.py (one definition, OPAQUE).


def _slice_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    out = []
    for d, (b, e, s) in zip(t[0].shape, zip(a["begin"], a["end"], a["strides"])):
        if not (0 <= b < d and s >= 1 and b < e <= d):
            raise ValueError(f"slice [{b}:{e}:{s}] of a dimension of {d}")
        out.append((e - b + s - 1) // s)
    return tuple(out)


def _slice_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    shape = _slice_infer([TensorType(tuple(int(s) for s in x[0].shape))], a)
    return te.compute(shape, lambda *i: x[0][tuple(b + k * s for k, b, s in
                                                    zip(i, a["begin"], a["strides"]))],
                      name="T_strided_slice", tag="injective")


def _slice_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return x[0][tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], a["strides"]))]


register_op("strided_slice", INJECTIVE, _slice_infer, _slice_compute, _slice_ref)


def _pad_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    return tuple(d + lo + hi for d, lo, hi in zip(t[0].shape, a["pad_before"], a["pad_after"]))


def _pad_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.pad(x[0], list(zip(a["pad_before"], a["pad_after"])),
                  constant_values=a["pad_value"])


register_op("nn.pad", INJECTIVE, _pad_infer,
            lambda x, a: topi.nn.pad(x[0], a["pad_before"], a["pad_after"], a["pad_value"]),
            _pad_ref)


# ---- resize ---------------------------------------------------------------------------------------
def _resize_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    n, c, _, _ = t[0].shape
    return (n, c, *a["size"])


def _src(method: str, mode: str, out: Any, size_in: int, size_out: int, scale: float) -> Any:
    """The input coordinate of output index ``out`` (ONNX ``coordinate_transformation_mode``);
    ``out`` is a te expression or a numpy array."""
    if mode == "align_corners":
        r = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
        return out * r
    if mode == "asymmetric":
        return out * (1.0 / scale)
    if mode == "pytorch_half_pixel" and size_out == 1:
        return out * 0.0
    return (out + 0.5) * (1.0 / scale) - 0.5  # half_pixel, pytorch_half_pixel


def _nearest(mode: str, src: Any, floor: Any, ceil: Any, half: Any) -> Any:
    """ONNX ``nearest_mode`` rounding of a source coordinate."""
    if mode == "floor":
        return floor(src)
    if mode == "ceil":
        return ceil(src)
    if mode == "round_prefer_ceil":
        return floor(src + half)
    return ceil(src - half)  # round_prefer_floor


def _resize_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data = x[0]
    n, c, h, w = (int(s) for s in data.shape)
    oh, ow = a["size"]
    dt = data.dtype

    def coord(i: Any, size_in: int, size_out: int, scale: float) -> tuple[Any, Any, Any]:
        src = _src(a["method"], a["mode"], te.cast(i, dt), size_in, size_out, scale)
        if a["method"] == "nearest":
            r = _nearest(a["nearest_mode"], src, te.floor, te.ceil, te.const(0.5, dt))
            k = te.max(te.min(te.cast(r, "int32"), size_in - 1), 0)
            return k, k, None
        src = te.max(src, te.const(0.0, dt))
        k0 = te.min(te.cast(te.floor(src), "int32"), size_in - 1)
        return k0, te.min(k0 + 1, size_in - 1), src - te.cast(k0, dt)

    def f(b: Any, ch: Any, i: Any, j: Any) -> PrimExpr:
        y0, y1, ly = coord(i, h, oh, a["scale"][0])
        x0, x1, lx = coord(j, w, ow, a["scale"][1])
        if ly is None:
            return data[b, ch, y0, x0]
        one = te.const(1.0, dt)
        top = data[b, ch, y0, x0] * (one - lx) + data[b, ch, y0, x1] * lx
        bot = data[b, ch, y1, x0] * (one - lx) + data[b, ch, y1, x1] * lx
        return top * (one - ly) + bot * ly

    return te.compute((n, c, oh, ow), f, name="T_resize", tag="injective")


def _resize_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data = x[0].astype(np.float64)
    _, _, h, w = data.shape
    oh, ow = a["size"]

    def coord(size_in: int, size_out: int, scale: float) -> tuple[Any, Any, Any]:
        src = _src(a["method"], a["mode"], np.arange(size_out, dtype=np.float64), size_in,
                   size_out, scale)
        if a["method"] == "nearest":
            r = _nearest(a["nearest_mode"], src, np.floor, np.ceil, 0.5)
            k = np.clip(r.astype(np.int64), 0, size_in - 1)
            return k, k, None
        src = np.maximum(src, 0.0)
        k0 = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
        return k0, np.minimum(k0 + 1, size_in - 1), src - k0

    y0, y1, ly = coord(h, oh, a["scale"][0])
    x0, x1, lx = coord(w, ow, a["scale"][1])
    if ly is None:
        return data[:, :, y0][:, :, :, x0].astype(x[0].dtype)
    lx, ly = lx[None, None, None, :], ly[None, None, :, None]
    top = data[:, :, y0][:, :, :, x0] * (1 - lx) + data[:, :, y0][:, :, :, x1] * lx
    bot = data[:, :, y1][:, :, :, x0] * (1 - lx) + data[:, :, y1][:, :, :, x1] * lx
    return (top * (1 - ly) + bot * ly).astype(x[0].dtype)


register_op("image.resize2d", INJECTIVE, _resize_infer, _resize_compute, _resize_ref)


# ---- reductions and normalisation ------------------------------------------------------------------
def _mean_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    axes = set(a["axis"])
    return tuple(1 if k in axes else d for k, d in enumerate(t[0].shape)
                 if a["keepdims"] or k not in axes)


def _reduce(kind: str) -> tuple[Any, Any]:
    """te compute and numpy reference of the reduction ``kind`` (sum, max, min, mean)."""
    reducer = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min}[kind]

    def compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
        data = x[0]
        axes = sorted(a["axis"])
        shape = _mean_infer([TensorType(tuple(int(s) for s in data.shape))], a)
        rs = [te.reduce_axis((0, data.shape[k]), name=f"k{k}") for k in axes]

        def idx(i: tuple[Any, ...]) -> tuple[Any, ...]:
            out, it, rit = [], iter(i), iter(rs)
            for k in range(len(data.shape)):
                if k in axes:
                    out.append(next(rit))
                    if a["keepdims"]:
                        next(it)
                else:
                    out.append(next(it))
            return tuple(out)

        total = te.compute(shape, lambda *i: reducer(data[idx(i)], axis=rs), name=f"T_{kind}")
        if kind != "mean":
            return total
        count = te.const(float(math.prod(int(data.shape[k]) for k in axes)), data.dtype)
        return te.compute(shape, lambda *i: total[i] / count, name="T_mean", tag="elemwise")

    fns: dict[str, Callable[..., Any]] = {"sum": np.sum, "mean": np.mean, "max": np.max,
                                          "min": np.min}
    fn = fns[kind]

    def reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
        kw = {"dtype": np.float64} if kind in ("sum", "mean") else {}
        return fn(x[0], axis=tuple(a["axis"]), keepdims=a["keepdims"], **kw).astype(x[0].dtype)

    return compute, reference


for _kind in ("sum", "mean", "max", "min"):
    register_op(_kind, ANCHOR, _mean_infer, *_reduce(_kind))
register_op("nn.global_max_pool2d", ANCHOR,
            lambda t, a: (*t[0].shape[:2], 1, 1),
            lambda x, a: topi.nn.global_pool2d(x[0], "max", layout="NCHW"),
            lambda x, a: x[0].max(axis=(2, 3), keepdims=True))


def _ln_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    ax = a["axis"]
    norm = t[0].shape[ax:]
    if t[1].shape != norm or t[2].shape != norm:
        raise ValueError(f"scale {t[1].shape} and bias {t[2].shape} must have shape {norm}")
    return t[0].shape


def _ln_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, gamma, beta = x
    ax, dt = a["axis"], data.dtype
    outer = tuple(data.shape[:ax])
    inner = tuple(data.shape[ax:])
    count = te.const(float(math.prod(int(s) for s in inner)), dt)

    def reduced(name: str, body: Any) -> te.Tensor:
        rs = [te.reduce_axis((0, s), name=f"r{k}") for k, s in enumerate(inner)]
        return te.compute(outer, lambda *i: te.sum(body(tuple(i) + tuple(rs)), axis=rs),
                          name=name)

    total = reduced("T_ln_sum", lambda i: data[i])

    def centred(i: Any) -> PrimExpr:
        return data[i] - total[i[:ax]] / count

    sq = reduced("T_ln_var", lambda i: centred(i) * centred(i))

    def norm(*i: Any) -> PrimExpr:
        inv = te.const(1.0, dt) / te.sqrt(sq[i[:ax]] / count + te.const(a["epsilon"], dt))
        return centred(i) * inv * gamma[i[ax:]] + beta[i[ax:]]

    return te.compute(data.shape, norm, name="T_layer_norm", tag="layer_norm")


def _ln_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data = x[0].astype(np.float64)
    axes = tuple(range(a["axis"], data.ndim))
    mu = data.mean(axis=axes, keepdims=True)
    var = ((data - mu) ** 2).mean(axis=axes, keepdims=True)
    return ((data - mu) / np.sqrt(var + a["epsilon"]) * x[1] + x[2]).astype(x[0].dtype)


register_op("nn.layer_norm", OPAQUE, _ln_infer, _ln_compute, _ln_ref)
