"""Network builders with Relay's names and argument conventions (``relay.nn.conv2d`` ...)."""

from __future__ import annotations

from typing import Any

from .ir import Call, Expr, TensorType, Var
from .op import GraphError, is_channelwise, make_call

__all__ = ["var", "add", "clip", "conv2d", "bias_add", "relu", "max_pool2d", "avg_pool2d",
           "global_avg_pool2d", "batch_flatten", "dense", "softmax", "dropout", "batch_norm",
           "concatenate", "conv3d", "max_pool3d", "avg_pool3d", "global_avg_pool3d"]


def _pair(x: Any, what: str) -> tuple[int, int]:
    if isinstance(x, int):
        return (x, x)
    t = tuple(int(v) for v in x)
    if len(t) != 2:
        raise GraphError(f"{what} must be an int or a pair, got {x!r}")
    return t  # type: ignore[return-value]


def _padding(p: Any) -> tuple[int, int, int, int]:
    """Relay's padding forms: int, (h, w) or (top, left, bottom, right)."""
    if isinstance(p, int):
        return (p, p, p, p)
    t = tuple(int(v) for v in p)
    if len(t) == 2:
        return (t[0], t[1], t[0], t[1])
    if len(t) == 4:
        return t  # type: ignore[return-value]
    raise GraphError(f"padding must be an int, (h, w) or (top, left, bottom, right), got {p!r}")


def var(name: str, shape: Any = None, dtype: str = "float32") -> Var:
    """A network input or parameter of a fixed shape."""
    if shape is None:
        raise GraphError(f"var {name!r} needs a shape (templtune networks are fully static)")
    return Var(name, TensorType(tuple(int(s) for s in shape), dtype))


def add(lhs: Expr, rhs: Expr) -> Call:
    """Element-wise sum of two values (numpy broadcasting)."""
    return make_call("add", [lhs, rhs])


def clip(data: Expr, a_min: float, a_max: float) -> Call:
    """Element-wise ``min(max(x, a_min), a_max)`` (ReLU6 is ``clip(x, 0, 6)``)."""
    if a_min > a_max:
        raise GraphError(f"clip: a_min {a_min} is above a_max {a_max}")
    return make_call("clip", [data], a_min=float(a_min), a_max=float(a_max))


def conv2d(data: Expr, weight: Expr, strides: Any = (1, 1), padding: Any = (0, 0),
           dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
           kernel_size: Any = None, data_layout: str = "NCHW", kernel_layout: str | None = None
           ) -> Call:
    """2-D convolution; kernels are OIHW with NCHW data and HWIO (``I`` the channels of a group;
    HWOI for depthwise) with NHWC."""
    if _pair(dilation, "dilation") != (1, 1):
        raise GraphError("nn.conv2d: only dilation 1 is supported in networks")
    depthwise = len(data.shape) == 4 and is_channelwise(groups, data.shape[3])
    expected = {"NCHW": "OIHW", "NHWC": "HWOI" if depthwise else "HWIO"}.get(data_layout)
    if expected is None:
        raise GraphError(f"nn.conv2d: unsupported data_layout {data_layout!r} (NCHW or NHWC)")
    if kernel_layout is not None and kernel_layout != expected:
        raise GraphError(f"nn.conv2d: kernel_layout {kernel_layout!r} with {data_layout} data; "
                         f"expected {expected}")
    call = make_call("nn.conv2d", [data, weight], strides=_pair(strides, "strides"),
                     padding=_padding(padding), groups=int(groups), data_layout=data_layout)
    ch = call.shape[1] if data_layout == "NCHW" else call.shape[3]
    if channels is not None and channels != ch:
        raise GraphError(f"nn.conv2d: channels={channels} but the kernel gives {ch}")
    return call


def bias_add(data: Expr, bias: Expr, axis: int = 1) -> Call:
    return make_call("nn.bias_add", [data, bias], axis=int(axis))


def relu(data: Expr) -> Call:
    return make_call("nn.relu", [data])


def max_pool2d(data: Expr, pool_size: Any = (1, 1), strides: Any = (1, 1), padding: Any = (0, 0),
               layout: str = "NCHW") -> Call:
    return make_call("nn.max_pool2d", [data], pool_size=_pair(pool_size, "pool_size"),
                     strides=_pair(strides, "strides"), padding=_padding(padding), layout=layout)


def avg_pool2d(data: Expr, pool_size: Any = (1, 1), strides: Any = (1, 1), padding: Any = (0, 0),
               layout: str = "NCHW") -> Call:
    return make_call("nn.avg_pool2d", [data], pool_size=_pair(pool_size, "pool_size"),
                     strides=_pair(strides, "strides"), padding=_padding(padding), layout=layout)


def global_avg_pool2d(data: Expr, layout: str = "NCHW") -> Call:
    return make_call("nn.global_avg_pool2d", [data], layout=layout)


def batch_flatten(data: Expr) -> Call:
    return make_call("nn.batch_flatten", [data])


def dense(data: Expr, weight: Expr, units: int | None = None) -> Call:
    call = make_call("nn.dense", [data, weight])
    if units is not None and units != call.shape[1]:
        raise GraphError(f"nn.dense: units={units} but the weight gives {call.shape[1]}")
    return call


def softmax(data: Expr, axis: int = -1) -> Call:
    return make_call("nn.softmax", [data], axis=int(axis))


def dropout(data: Expr, rate: float = 0.5) -> Expr:
    """Dropout at inference: the input itself (what Relay's SimplifyInference leaves)."""
    if not 0.0 <= float(rate) < 1.0:
        raise GraphError(f"nn.dropout: rate must be in [0, 1), got {rate!r}")
    return data


def batch_norm(data: Expr, gamma: Expr, beta: Expr, moving_mean: Expr, moving_var: Expr,
               axis: int = 1, epsilon: float = 1e-5) -> Call:
    """Inference batch normalisation with the moving statistics. Deviation: returns the
    normalised tensor itself, not Relay's ``(out, mean, var)`` tuple."""
    return make_call("nn.batch_norm", [data, gamma, beta, moving_mean, moving_var],
                     axis=int(axis), epsilon=float(epsilon))


def concatenate(data: Any, axis: int) -> Call:
    """Join tensors along ``axis`` (``relay.concatenate``)."""
    return make_call("concatenate", list(data), axis=int(axis))


def _triple(x: Any, what: str) -> tuple[int, int, int]:
    t = (int(x),) * 3 if isinstance(x, int) else tuple(int(v) for v in x)
    if len(t) != 3:
        raise GraphError(f"{what} must be an int or a triple, got {x!r}")
    return t  # type: ignore[return-value]


def _padding3d(p: Any) -> tuple[int, ...]:
    """int, (d, h, w) or (front, top, left, back, bottom, right)."""
    t = (int(p),) * 3 if isinstance(p, int) else tuple(int(v) for v in p)
    if len(t) == 3:
        return t + t
    if len(t) == 6:
        return t
    raise GraphError(f"3-D padding must be an int, a triple or 6 values, got {p!r}")


def conv3d(data: Expr, weight: Expr, strides: Any = 1, padding: Any = 0,
           data_layout: str = "NCDHW") -> Call:
    """3-D convolution of NCDHW data with an OIDHW kernel."""
    if data_layout != "NCDHW":
        raise GraphError(f"nn.conv3d: only NCDHW data is supported, not {data_layout!r}")
    return make_call("nn.conv3d", [data, weight], strides=_triple(strides, "strides"),
                     padding=_padding3d(padding))


def max_pool3d(data: Expr, pool_size: Any = 1, strides: Any = 1, padding: Any = 0) -> Call:
    return make_call("nn.max_pool3d", [data], pool_size=_triple(pool_size, "pool_size"),
                     strides=_triple(strides, "strides"), padding=_padding3d(padding))


def avg_pool3d(data: Expr, pool_size: Any = 1, strides: Any = 1, padding: Any = 0) -> Call:
    return make_call("nn.avg_pool3d", [data], pool_size=_triple(pool_size, "pool_size"),
                     strides=_triple(strides, "strides"), padding=_padding3d(padding))


def global_avg_pool3d(data: Expr) -> Call:
    return make_call("nn.global_avg_pool3d", [data])


def __getattr__(name: str) -> Any:
    # NOTE: builders of operators registered by their own file (templtune/graph/ops/).
    from .op import BUILDERS

    builder = BUILDERS.get(f"nn.{name}")
    if builder is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return builder
