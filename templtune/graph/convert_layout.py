"""``ConvertLayout``: re-lay a network's convolutions (Relay's ``relay.transform.ConvertLayout``).

``ConvertLayout({"nn.conv2d": ["NHWC", "default"]})`` turns every NCHW convolution into an NHWC
one (kernel OIHW -> HWIO, depthwise OIHW -> HWOI) and carries the new layout through the ops
that can take it, so that ``layout_transform`` calls remain only at the converted region's
edges: after the network's input, and where a value leaves for an op that needs the original
layout (``batch_flatten``/``reshape`` before a dense, ``dense``, ``image.resize2d``, ...) or for
the network's output. Ops that follow their input's layout: element-wise unary and binary ops
(a broadcast operand of lower rank is reshaped and re-laid too), ``bias_add``, ``batch_norm``,
``softmax`` (axis remapped), max/avg/global pooling (the ``layout`` attribute; a global max
pool becomes a ``max`` over H and W), ``nn.pad``, ``strided_slice``, ``concatenate``,
``sum/mean/max/min`` and ``transpose``.

The kernels get a ``layout_transform`` of their weight parameter; :func:`relay.build
<templtune.graph.build.build>` and ``extract_tasks`` fold it into a new parameter once, when the
weights are bound (:mod:`templtune.graph.fold`), as Relay's FoldConstant does after binding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .ir import Call, Expr, Function
from .op import GraphError, is_channelwise, make_call
from .ops.elemwise import BINARY, UNARY
from .transform import Pass

__all__ = ["ConvertLayout", "RemoveUnusedFunctions"]

#: (data layout, depthwise) -> the kernel layout conv2d takes with it
KERNEL_LAYOUT = {("NCHW", False): "OIHW", ("NCHW", True): "OIHW",
                 ("NHWC", False): "HWIO", ("NHWC", True): "HWOI"}
_CONV_OPS = ("nn.conv2d",)


@dataclass(frozen=True, slots=True)
class _Lay:
    """A converted value: laid out as ``physical`` where the original network has ``logical``."""

    logical: str
    physical: str

    def axis(self, logical_axis: int) -> int:
        """Where the original's axis ``logical_axis`` is now."""
        return self.physical.index(self.logical[logical_axis])

    def permute(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Per-axis values given in the original's axis order, in the new order."""
        return tuple(values[self.logical.index(ch)] for ch in self.physical)

    def drop(self, axes: set[int]) -> _Lay | None:
        gone = {self.logical[k] for k in axes}
        lay = _Lay("".join(c for c in self.logical if c not in gone),
                   "".join(c for c in self.physical if c not in gone))
        return None if lay.logical == lay.physical else lay


Value = tuple[Expr, "_Lay | None"]
_ELEMWISE = {"nn.relu", "clip", *UNARY}
_BROADCAST = {"add", *BINARY}
_POOLS = {"nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d"}
_REDUCE = {"sum", "mean", "max", "min"}


class _Converter:
    """Rewrites one network; each original value maps to (new value, its layout or None)."""

    def __init__(self, layout: str, kernel_layout: str) -> None:
        self.layout, self.kernel_layout = layout, kernel_layout
        self.env: dict[int, Value] = {}
        self.relaid: dict[tuple[int, _Lay | None], Expr] = {}

    def value(self, old: Expr) -> Value:
        return self.env.get(id(old), (old, None))

    def relay(self, old: Expr, want: _Lay | None) -> Expr:
        """The converted ``old`` laid out as ``want`` (None: as in the original network); one
        transform per (value, layout), shared by all consumers."""
        new, lay = self.value(old)
        if lay == want:
            return new
        key = (id(old), want)
        if key in self.relaid:
            return self.relaid[key]
        x = new
        if lay is not None and want is not None and lay.logical == want.logical:
            x = make_call("layout_transform", [x], src_layout=lay.physical,
                          dst_layout=want.physical)
        else:
            if lay is not None:
                x = make_call("layout_transform", [x], src_layout=lay.physical,
                              dst_layout=lay.logical)
            if want is not None:
                extra = len(want.logical) - len(x.shape)
                if extra < 0:
                    raise GraphError(f"cannot lay a rank-{len(x.shape)} value as {want.physical}")
                if extra:  # a broadcast operand: numpy aligns trailing axes
                    x = make_call("reshape", [x], newshape=(1,) * extra + tuple(x.shape))
                x = make_call("layout_transform", [x], src_layout=want.logical,
                              dst_layout=want.physical)
        self.relaid[key] = x
        return x

    # ---- per-op rules ------------------------------------------------------------------------
    def default(self, c: Call) -> Value:
        """An op that needs the original layout: its inputs go back to it."""
        args = [self.relay(a, None) for a in c.args]
        if all(n is o for n, o in zip(args, c.args)):
            return c, None
        return _rebuild(c, args), None

    def conv(self, c: Call) -> Value:
        a = dict(c.attrs)
        src = a["data_layout"]
        if src == self.layout:
            return self.default(c)
        # NOTE: a grouped conv's kernel is laid out as an ungrouped one's (HWIO <-> OIHW)
        depthwise = is_channelwise(a["groups"], c.args[0].shape[src.index("C")])
        kdst = KERNEL_LAYOUT[(self.layout, depthwise)]
        if self.kernel_layout not in ("default", kdst):
            raise GraphError(f"ConvertLayout: nn.conv2d with {self.layout} data takes "
                             f"{kdst} kernels here, not {self.kernel_layout!r}")
        want = _Lay(src, self.layout)
        x = self.relay(c.args[0], want)
        w = self.relay(c.args[1], _Lay(KERNEL_LAYOUT[(src, depthwise)], kdst))
        return _rebuild(c, [x, w], data_layout=self.layout), want

    def elemwise(self, c: Call) -> Value:
        new, lay = self.value(c.args[0])
        return (c, None) if lay is None else (_rebuild(c, [new]), lay)

    def broadcast(self, c: Call) -> Value:
        rank = len(c.shape)
        lay = next((lay for a in c.args for lay in [self.value(a)[1]]
                    if lay is not None and len(a.shape) == rank), None)
        if lay is None:
            return self.default(c)
        return _rebuild(c, [self.relay(a, lay) for a in c.args]), lay

    def along_axis(self, c: Call) -> Value:
        """bias_add, batch_norm, softmax: one axis attribute; other inputs are per-channel."""
        new, lay = self.value(c.args[0])
        if lay is None:
            return self.default(c)
        axis = lay.axis(dict(c.attrs)["axis"] % len(c.args[0].shape))
        rest = [self.relay(a, None) for a in c.args[1:]]
        return _rebuild(c, [new, *rest], axis=axis), lay

    def pool(self, c: Call) -> Value:
        new, lay = self.value(c.args[0])
        if (lay is None or lay.logical != dict(c.attrs)["layout"]
                or lay.physical not in ("NCHW", "NHWC")):
            return self.default(c)
        return _rebuild(c, [new], layout=lay.physical), lay

    def global_max_pool(self, c: Call) -> Value:
        new, lay = self.value(c.args[0])
        if lay != _Lay("NCHW", "NHWC"):
            return self.default(c)
        return make_call("max", [new], axis=(1, 2), keepdims=True), lay

    def per_axis(self, *keys: str) -> Callable[[Call], Value]:
        """Ops with per-axis tuple attributes (``nn.pad``, ``strided_slice``)."""
        def rule(c: Call) -> Value:
            new, lay = self.value(c.args[0])
            if lay is None:
                return self.default(c)
            a = dict(c.attrs)
            return _rebuild(c, [new], **{k: lay.permute(a[k]) for k in keys}), lay
        return rule

    def concat(self, c: Call) -> Value:
        rank = len(c.shape)
        lay = next((lay for a in c.args for lay in [self.value(a)[1]]
                    if lay is not None and len(lay.logical) == rank), None)
        if lay is None:
            return self.default(c)
        args = [self.relay(a, lay) for a in c.args]
        return _rebuild(c, args, axis=lay.axis(dict(c.attrs)["axis"] % rank)), lay

    def reduce(self, c: Call) -> Value:
        new, lay = self.value(c.args[0])
        if lay is None:
            return self.default(c)
        a = dict(c.attrs)
        nd = len(c.args[0].shape)
        axes = {k % nd for k in a["axis"]}
        out = _rebuild(c, [new], axis=tuple(sorted(lay.axis(k) for k in axes)))
        return out, (lay if a["keepdims"] else lay.drop(axes))

    def transpose(self, c: Call) -> Value:
        new, lay = self.value(c.args[0])
        if lay is None:
            return self.default(c)
        # NOTE: output axis i is the original's axis axes[i]: read it where it lies now
        axes = tuple(lay.axis(k % len(c.shape)) for k in dict(c.attrs)["axes"])
        return _rebuild(c, [new], axes=axes), None

    def rule(self, op: str) -> Callable[[Call], Value]:
        if op in _CONV_OPS:
            return self.conv
        if op in _ELEMWISE:
            return self.elemwise
        if op in _BROADCAST:
            return self.broadcast
        if op in ("nn.bias_add", "nn.batch_norm", "nn.softmax"):
            return self.along_axis
        if op in _POOLS:
            return self.pool
        if op in _REDUCE:
            return self.reduce
        table: dict[str, Callable[[Call], Value]] = {
            "nn.global_max_pool2d": self.global_max_pool,
            "nn.pad": self.per_axis("pad_before", "pad_after"),
            "strided_slice": self.per_axis("begin", "end", "strides"),
            "concatenate": self.concat, "transpose": self.transpose}
        return table.get(op, self.default)

    def run(self, func: Function) -> Function:
        for c in func.calls():
            self.env[id(c)] = self.rule(c.op)(c)
        body = self.relay(func.body, None)
        if body is func.body:
            return func
        assert isinstance(body, Call)
        return Function(func.params, body, func.name)


def _rebuild(c: Call, args: list[Expr], **attrs: Any) -> Call:
    return make_call(c.op, args, **{**dict(c.attrs), **attrs})


class ConvertLayout(Pass):
    """Convert the layout of convolutions and propagate it (``relay.transform.ConvertLayout``).

    Parameters
    ----------
    desired_layouts : dict
        ``{"nn.conv2d": [data_layout, kernel_layout]}``: data ``"NHWC"`` or ``"NCHW"``; kernel
        ``"default"`` (HWIO, HWOI for depthwise, with NHWC; OIHW with NCHW) or that layout.

    Raises
    ------
    GraphError
        For an operator other than ``nn.conv2d`` or a layout it cannot take.
    """

    name = "ConvertLayout"
    opt_level = 3
    required = ("InferType",)

    def __init__(self, desired_layouts: dict[str, Sequence[str]]) -> None:
        unknown = sorted(set(desired_layouts) - set(_CONV_OPS))
        if unknown:
            raise GraphError(f"ConvertLayout converts {list(_CONV_OPS)} (other ops follow "
                             f"their input's layout); got {unknown}")
        spec = list(desired_layouts.get("nn.conv2d", ("NHWC", "default")))
        if not 1 <= len(spec) <= 2 or spec[0] not in ("NCHW", "NHWC"):
            raise GraphError(f"ConvertLayout: nn.conv2d takes [data_layout, kernel_layout] with "
                             f"data NCHW or NHWC, got {spec!r}")
        self.layout = str(spec[0])
        self.kernel_layout = str(spec[1]) if len(spec) == 2 else "default"
        allowed = {"default", *(KERNEL_LAYOUT[(self.layout, d)] for d in (False, True))}
        if self.kernel_layout not in allowed:
            raise GraphError(f"ConvertLayout: kernel layout {self.kernel_layout!r} with "
                             f"{self.layout} data; expected one of {sorted(allowed)}")
        self.desired_layouts = {"nn.conv2d": [self.layout, self.kernel_layout]}

    def transform(self, mod: Any) -> Function:
        if not isinstance(mod, Function):
            raise GraphError(f"ConvertLayout expects a graph Function, got {type(mod).__name__}")
        return _Converter(self.layout, self.kernel_layout).run(mod)


class RemoveUnusedFunctions(Pass):
    """``relay.transform.RemoveUnusedFunctions``: a templtune network is a single function
    (``main``), so there is never another one to remove; the network is returned as it is."""

    name = "RemoveUnusedFunctions"
    opt_level = 1

    def __init__(self, entry_functions: Any = None) -> None:
        self.entry_functions = tuple(entry_functions or ("main",))

    def transform(self, mod: Any) -> Function:
        if not isinstance(mod, Function):
            raise GraphError(f"RemoveUnusedFunctions expects a graph Function, got "
                             f"{type(mod).__name__}")
        return mod
