"""Operators of the network IR: type inference, the te compute, and a numpy reference each.

The builders (:mod:`templtune.graph.nn` and :func:`add`) check shapes when a call is built, so a
bad network fails where it is written, with the operator and the shapes in the message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from templtune import te, topi
from templtune.topi import testing as ref
from templtune.topi.utils import get_const_int

from .ir import Attrs, Call, Expr, TensorType

ANCHOR, INJECTIVE, OPAQUE = "anchor", "injective", "opaque"


class GraphError(ValueError):
    """A network that cannot be typed, fused or compiled (names the operator and shapes)."""


@dataclass(frozen=True, slots=True)
class OpDef:
    """``kind``: ANCHOR ops start a fused group and take element-wise followers; INJECTIVE ops
    join their producer's group; OPAQUE ops stand alone (nothing fuses after them)."""

    name: str
    kind: str
    infer: Callable[[list[TensorType], dict[str, Any]], tuple[int, ...]]
    compute: Callable[[list[te.Tensor], dict[str, Any]], te.Tensor]
    reference: Callable[[list[np.ndarray], dict[str, Any]], np.ndarray]
    #: the output dtype of an op whose inputs may differ in dtype (``take``'s integer indices,
    #: ``cast``): it checks them and raises ValueError; None: one dtype in, the same out
    dtype: Callable[[list[TensorType], dict[str, Any]], str] | None = None


OPS: dict[str, OpDef] = {}


def _register(name: str, kind: str, infer: Callable, compute: Callable, reference: Callable,
              dtype: Callable | None = None) -> None:
    OPS[name] = OpDef(name, kind, infer, compute, reference, dtype)


#: op name -> its network builder (``nn.batch_matmul``), for ops added by :func:`register_op`
BUILDERS: dict[str, Callable[..., Call]] = {}


def register_op(name: str, kind: str, infer: Callable, compute: Callable, reference: Callable,
                builder: Callable[..., Call] | None = None, dtype: Callable | None = None
                ) -> OpDef:
    """Add a network operator: its shape inference ``infer(types, attrs)``, te ``compute(tensors,
    attrs)``, numpy ``reference(arrays, attrs)`` and, optionally, the builder users call
    (``relay.nn.<short name>`` for a ``nn.``-prefixed op; see :mod:`templtune.graph.ops`) and
    the output dtype rule ``dtype(types, attrs)`` of an op whose inputs may mix dtypes.

    Raises
    ------
    GraphError
        If an operator of that name exists.
    """
    if name in OPS:
        raise GraphError(f"operator {name!r} is already registered")
    _register(name, kind, infer, compute, reference, dtype)
    if builder is not None:
        BUILDERS[name] = builder
    return OPS[name]


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown operator {name!r}; known: {sorted(OPS)}") from None


def make_call(op: str, args: list[Expr], **attrs: Any) -> Call:
    """Build a typed call (raises :class:`GraphError` naming the op on a shape mismatch)."""
    d = get_op(op)
    types = [a.type for a in args]
    dtypes = {t.dtype for t in types}
    if d.dtype is None and len(dtypes) != 1:
        raise GraphError(f"{op}: mixed input dtypes {sorted(dtypes)}")
    try:
        shape = d.infer(types, attrs)
        dtype = types[0].dtype if d.dtype is None else d.dtype(types, attrs)
    except (IndexError, ValueError, ZeroDivisionError) as exc:
        shapes = ", ".join(f"{t.shape} {t.dtype}" if d.dtype else str(t.shape) for t in types)
        raise GraphError(f"{op}({shapes}, {attrs}): {exc}") from None
    frozen: Attrs = tuple(sorted(attrs.items()))
    return Call(op, tuple(args), frozen, TensorType(tuple(int(s) for s in shape), dtype))


# ---- conv2d -------------------------------------------------------------------------------------
def _hw(layout: str, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(channels, height, width) of a 4-D activation."""
    if layout == "NCHW":
        return shape[1], shape[2], shape[3]
    if layout == "NHWC":
        return shape[3], shape[1], shape[2]
    raise ValueError(f"unsupported layout {layout!r} (NCHW or NHWC)")


def _kernel(attrs: dict[str, Any], w: tuple[int, ...], c: int) -> tuple[int, int, int, int]:
    """(out channels, in channels per group, kh, kw) from the kernel shape and layout (``c``:
    the input channels)."""
    if attrs["data_layout"] == "NCHW":      # OIHW
        return w[0], w[1], w[2], w[3]
    if not is_channelwise(attrs["groups"], c):  # HWIO, I the channels of a group
        return w[3], w[2], w[0], w[1]
    return w[2] * w[3], 1, w[0], w[1]      # depthwise HWOI: (kh, kw, C, multiplier)


def _out(size: int, k: int, lo: int, hi: int, s: int) -> int:
    out = (size + lo + hi - k) // s + 1
    if out <= 0:
        raise ValueError(f"window {k} with padding ({lo}, {hi}) does not fit size {size}")
    return out


def _conv_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    layout = a["data_layout"]
    c, h, w = _hw(layout, t[0].shape)
    o, cg, kh, kw = _kernel(a, t[1].shape, c)
    g = a["groups"]
    if cg * g != c or o % g:
        raise ValueError(f"kernel {t[1].shape} does not match {c} input channels in {g} groups")
    pt, pl, pb, pr = a["padding"]
    sh, sw = a["strides"]
    oh, ow = _out(h, kh, pt, pb, sh), _out(w, kw, pl, pr, sw)
    n = t[0].shape[0]
    return (n, o, oh, ow) if layout == "NCHW" else (n, oh, ow, o)


def _grouped_nhwc(x: te.Tensor, w: te.Tensor, a: dict[str, Any]) -> te.Tensor:
    """NHWC data, HWOI kernel (depthwise: ``[KH, KW, C, M]``) or HWIO kernel of ``groups``
    groups (``[KH, KW, C/groups, O]``)."""
    kh, kw = get_const_int(w.shape[0]), get_const_int(w.shape[1])
    pt, pl, pb, pr = a["padding"]
    sh, sw = a["strides"]
    xp = topi.nn.pad(x, (0, pt, pl, 0), (0, pb, pr, 0), name="PaddedInput")
    n, h, wd, c = (get_const_int(s) for s in x.shape)
    oh, ow = _out(h, kh, pt, pb, sh), _out(wd, kw, pl, pr, sw)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    if a["groups"] == c:
        m = get_const_int(w.shape[3])
        return te.compute(
            (n, oh, ow, c * m),
            lambda b, i, j, k: te.sum(xp[b, i * sh + ry, j * sw + rx, k // m]
                                      * w[ry, rx, k // m, k % m], axis=[ry, rx]),
            name="DepthwiseConv2d", tag="depthwise_conv2d_nhwc")
    cg, o = get_const_int(w.shape[2]), get_const_int(w.shape[3])
    og = o // a["groups"]
    rc = te.reduce_axis((0, cg), name="rc")
    return te.compute(
        (n, oh, ow, o),
        lambda b, i, j, k: te.sum(xp[b, i * sh + ry, j * sw + rx, k // og * cg + rc]
                                  * w[ry, rx, rc, k], axis=[ry, rx, rc]),
        name="group_conv2d_nhwc", tag="group_conv2d_nhwc")


def is_channelwise(groups: int, in_channels: Any) -> bool:
    """Whether a convolution in ``groups`` groups has one group per input channel (depthwise,
    with any channel multiplier): its NHWC kernel is HWOI, any other's HWIO."""
    return groups != 1 and groups == int(in_channels)


def is_depthwise(groups: int, in_channels: Any, out_channels: Any) -> bool:
    """Whether a convolution in ``groups`` groups is depthwise: one group per input channel,
    one output channel per group (other grouped convolutions run as such)."""
    return is_channelwise(groups, in_channels) and int(out_channels) == int(in_channels)


def _conv_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, w = x
    g, s, p = a["groups"], a["strides"], a["padding"]
    if a["data_layout"] == "NCHW":
        if g == 1:
            return topi.nn.conv2d_nchw(data, w, s, p, 1)
        if is_depthwise(g, data.shape[1], w.shape[0]):
            return topi.nn.depthwise_conv2d_nchw(data, w, s, p, 1)
        return topi.nn.group_conv2d_nchw(data, w, s, p, 1, g)
    if g == 1:
        return topi.nn.conv2d_nhwc(data, w, s, p, 1)
    return _grouped_nhwc(data, w, a)


def _conv_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data, w = x
    g, s, p = a["groups"], a["strides"], a["padding"]
    if a["data_layout"] == "NCHW":
        return ref.conv2d_nchw_python(data, w, s, p, groups=g)
    if g != data.shape[3]:                 # HWIO of g groups
        return ref.conv2d_nhwc_python(data, w, s, p, groups=g)
    kh, kw = w.shape[:2]
    wn = w.transpose(2, 3, 0, 1).reshape(-1, 1, kh, kw)  # HWCM -> (C*M)1HW
    out = ref.conv2d_nchw_python(data.transpose(0, 3, 1, 2), wn, s, p, groups=g)
    return out.transpose(0, 2, 3, 1)


_register("nn.conv2d", ANCHOR, _conv_infer, _conv_compute, _conv_ref)


# ---- dense, pooling, softmax --------------------------------------------------------------------
def _dense_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    (m, k), (n, k2) = t[0].shape, t[1].shape
    if k != k2:
        raise ValueError(f"inner dimensions differ ({k} vs {k2})")
    return (m, n)


_register("nn.dense", ANCHOR, _dense_infer, lambda x, a: topi.nn.dense(x[0], x[1]),
          lambda x, a: ref.dense_python(x[0], x[1]))


def _is_blocked(layout: str) -> bool:
    """``NCHW[x]c`` (5-D, pooled like NCHW; see :mod:`templtune.graph.ops.nchwc`)."""
    return layout.startswith("NCHW") and layout.endswith("c") and layout != "NCHW"


def _pool_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    layout = a["layout"]
    if _is_blocked(layout):
        n, c1, h, w, b = t[0].shape
        kh, kw = a["pool_size"]
        pt, pl, pb, pr = a["padding"]
        sh, sw = a["strides"]
        return (n, c1, _out(h, kh, pt, pb, sh), _out(w, kw, pl, pr, sw), b)
    c, h, w = _hw(layout, t[0].shape)
    kh, kw = a["pool_size"]
    pt, pl, pb, pr = a["padding"]
    sh, sw = a["strides"]
    oh, ow = _out(h, kh, pt, pb, sh), _out(w, kw, pl, pr, sw)
    n = t[0].shape[0]
    return (n, c, oh, ow) if layout == "NCHW" else (n, oh, ow, c)


def _pool(kind: str) -> tuple[Callable, Callable]:
    def compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
        return topi.nn.pool2d(x[0], a["pool_size"], a["strides"], a["padding"], kind,
                              layout=a["layout"], count_include_pad=False)

    def reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
        if _is_blocked(a["layout"]):
            from .ops.nchwc import pack_data, unpack_data

            out = ref.pool2d_python(unpack_data(x[0]), a["pool_size"], a["strides"],
                                    a["padding"], kind, count_include_pad=False)
            return pack_data(out, x[0].shape[4])
        return ref.pool2d_python(x[0], a["pool_size"], a["strides"], a["padding"], kind,
                                 count_include_pad=False, layout=a["layout"])

    return compute, reference


_register("nn.max_pool2d", ANCHOR, _pool_infer, *_pool("max"))
_register("nn.avg_pool2d", ANCHOR, _pool_infer, *_pool("avg"))


def _gap_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    if _is_blocked(a["layout"]):
        n, c1, _, _, b = t[0].shape
        return (n, c1, 1, 1, b)
    c, _, _ = _hw(a["layout"], t[0].shape)
    n = t[0].shape[0]
    return (n, c, 1, 1) if a["layout"] == "NCHW" else (n, 1, 1, c)


def _gap_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    axes = (1, 2) if a["layout"] == "NHWC" else (2, 3)
    return x[0].mean(axis=axes, keepdims=True, dtype=np.float64).astype(x[0].dtype)


_register("nn.global_avg_pool2d", ANCHOR, _gap_infer,
          lambda x, a: topi.nn.global_pool2d(x[0], "avg", layout=a["layout"]), _gap_ref)
_register("nn.softmax", OPAQUE, lambda t, a: t[0].shape,
          lambda x, a: topi.nn.softmax(x[0], axis=a["axis"]),
          lambda x, a: ref.softmax_python(x[0], axis=a["axis"]))


# ---- injective ----------------------------------------------------------------------------------
def _bias_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    axis = a["axis"] % len(t[0].shape)
    if t[1].shape != (t[0].shape[axis],):
        raise ValueError(f"bias of shape {t[1].shape} does not match axis {axis}")
    return t[0].shape


def _bias_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    axis = a["axis"] % x[0].ndim
    shape = [1] * x[0].ndim
    shape[axis] = -1
    return x[0] + x[1].reshape(shape)


def broadcast_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    """numpy's broadcast of the input shapes (the result type of an element-wise op)."""
    try:
        return tuple(np.broadcast_shapes(*(x.shape for x in t)))
    except ValueError:
        raise ValueError("shapes differ and do not broadcast: "
                         f"{' vs '.join(str(x.shape) for x in t)}") from None


def _flatten_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    return (t[0].shape[0], int(np.prod(t[0].shape[1:])))


_register("nn.bias_add", INJECTIVE, _bias_infer,
          lambda x, a: topi.nn.bias_add(x[0], x[1], axis=a["axis"]), _bias_ref)
_register("nn.relu", INJECTIVE, lambda t, a: t[0].shape, lambda x, a: topi.nn.relu(x[0]),
          lambda x, a: np.maximum(x[0], 0))
_register("add", INJECTIVE, broadcast_infer, lambda x, a: topi.add(x[0], x[1]),
          lambda x, a: x[0] + x[1])
_register("nn.batch_flatten", INJECTIVE, _flatten_infer,
          lambda x, a: topi.nn.batch_flatten(x[0]), lambda x, a: x[0].reshape(x[0].shape[0], -1))


def _clip_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    lo, hi = float(a["a_min"]), float(a["a_max"])
    return te.compute(x[0].shape, lambda *i: te.max(te.min(x[0][i], te.const(hi, x[0].dtype)),
                                                    te.const(lo, x[0].dtype)),
                      name="T_clip", tag="elemwise")


_register("clip", INJECTIVE, lambda t, a: t[0].shape, _clip_compute,
          lambda x, a: np.clip(x[0], a["a_min"], a["a_max"]))


# NOTE: the zoo's extra operators register themselves into OPS (kept in their own files)
from . import op3d, op_zoo  # noqa: E402,F401
