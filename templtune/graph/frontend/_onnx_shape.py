"""ONNX handlers that move data or contract it: shapes, slices, matrix products, Softmax,
ReduceMean, Resize, Pad (methods of :class:`._onnx_ops.OnnxOps`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr
from ..op import make_call
from ..ops.elemwise import binary
from ..ops.typed import take


def _reshape(x: Expr, shape: tuple[int, ...]) -> Expr:
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    if len(shape) == 2 and len(x.shape) > 2 and shape[0] == x.shape[0]:
        return nn.batch_flatten(x)  # what dense groups and templates know
    return make_call("reshape", [x], newshape=shape)


def _axes(self: Any, node: Any, a: dict[str, Any], k: int = 1) -> list[int] | None:
    if "axes" in a:
        return [int(v) for v in a["axes"]]
    if self.has(node, k):
        return [int(v) for v in self.const(node.input[k], node)]
    return None


def op_Reshape(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    target = [int(d) for d in self.const(node.input[1], node)]
    if not a.get("allowzero", 0):
        target = [x.shape[k] if d == 0 else d for k, d in enumerate(target)]
    if target.count(-1) == 1:
        rest = math.prod(d for d in target if d != -1)
        target[target.index(-1)] = math.prod(x.shape) // max(rest, 1)
    if math.prod(target) != math.prod(x.shape):
        raise self.fail(node, f"cannot reshape {x.shape} to {target}")
    return _reshape(x, tuple(target))


def op_Flatten(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    axis = int(a.get("axis", 1)) % (len(x.shape) + 1)
    return _reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


def op_Squeeze(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    axes = _axes(self, node, a)
    nd = len(x.shape)
    drop = {d % nd for d in axes} if axes is not None else {
        k for k, d in enumerate(x.shape) if d == 1}
    return _reshape(x, tuple(d for k, d in enumerate(x.shape) if k not in drop))


def op_Unsqueeze(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    axes = _axes(self, node, a) or []
    out = len(x.shape) + len(axes)
    shape, it = [], iter(x.shape)
    ins = {d % out for d in axes}
    for k in range(out):
        shape.append(1 if k in ins else next(it))
    return _reshape(x, tuple(shape))


def op_Transpose(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    perm = tuple(int(p) for p in a.get("perm", range(len(x.shape) - 1, -1, -1)))
    if perm == tuple(range(len(x.shape))):
        return x
    return make_call("transpose", [x], axes=perm)


def op_Concat(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    parts = [self.x(node, k) for k in range(len(node.input)) if node.input[k]]
    axis = int(a["axis"]) % len(parts[0].shape)
    parts = [p for p in parts if p.shape[axis] > 0]
    return parts[0] if len(parts) == 1 else make_call("concatenate", parts, axis=axis)


def op_Split(self: Any, node: Any, a: dict[str, Any]) -> list[Expr]:
    x = self.x(node)
    axis = int(a.get("axis", 0)) % len(x.shape)
    if "split" in a:
        sizes = [int(s) for s in a["split"]]
    elif self.has(node, 1):
        sizes = [int(s) for s in self.const(node.input[1], node)]
    else:
        n = int(a.get("num_outputs", len(node.output)))
        each = -(-x.shape[axis] // n)
        sizes = [min(each, x.shape[axis] - k * each) for k in range(n)]
    outs, start = [], 0
    for s in sizes:
        outs.append(self._slice(x, axis, start, start + s))
        start += s
    return outs


def op_Slice(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    nd = len(x.shape)
    starts = [int(v) for v in self.const(node.input[1], node)]
    ends = [int(v) for v in self.const(node.input[2], node)]
    axes = ([int(v) for v in self.const(node.input[3], node)] if self.has(node, 3)
            else list(range(len(starts))))
    steps = ([int(v) for v in self.const(node.input[4], node)] if self.has(node, 4)
             else [1] * len(starts))
    out = x
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax %= nd
        d = x.shape[ax]
        if st < 1:
            raise self.fail(node, f"step {st} (only positive steps are supported)")
        s = min(max(s + d if s < 0 else s, 0), d)
        e = min(max(e + d if e < 0 else e, 0), d)
        if (s, e, st) != (0, d, 1):
            if e <= s:
                raise self.fail(node, f"empty slice [{s}:{e}] of axis {ax}")
            out = self._slice(out, ax, s, e, st)
    return out


def op_Gather(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    nd = len(x.shape)
    axis = int(a.get("axis", 0)) % nd
    if node.input[1] not in self.consts:
        # NOTE: indices computed at run time (token ids): an embedding lookup
        return take(x, self.x(node, 1), axis)
    idx = self.const(node.input[1], node).astype(np.int64)
    flat = [int(i) % x.shape[axis] for i in idx.reshape(-1)]
    if len(flat) > 64:
        raise self.fail(node, f"{len(flat)} indices on an activation (at most 64)")
    parts = [self._slice(x, axis, i, i + 1) for i in flat]
    if len(flat) > 1 and flat == list(range(flat[0], flat[0] + len(flat))):
        y: Expr = self._slice(x, axis, flat[0], flat[-1] + 1)
    else:
        y = parts[0] if len(parts) == 1 else make_call("concatenate", parts, axis=axis)
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    return _reshape(y, shape)


def op_Expand(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    shape = tuple(np.broadcast_shapes(x.shape, tuple(int(d) for d in
                                                     self.const(node.input[1], node))))
    if shape == x.shape:
        return x
    return binary("add", x, self.param(f"{node.name}_zeros", np.zeros(shape)))


# ---- products -------------------------------------------------------------------------------
def _matmul(self: Any, node: Any, ae: Expr, b_name: str) -> Expr:
    """``A @ B`` for N-D ``A`` (numpy semantics); ``B`` a constant or an activation."""
    if b_name in self.consts and self.consts[b_name].ndim == 2:
        w = self.consts[b_name]
        lead = ae.shape[:-1]
        flat = _reshape(ae, (math.prod(lead), ae.shape[-1])) if len(ae.shape) != 2 else ae
        y = nn.dense(flat, self.param(b_name, np.ascontiguousarray(w.T)))
        return _reshape(y, (*lead, w.shape[1])) if len(ae.shape) != 2 else y
    be = self.x(node, 1) if node.input[1] == b_name else self.env[b_name]
    if len(ae.shape) < 2 or len(be.shape) < 2:
        raise self.fail(node, "1-D operands are not supported")
    batch = tuple(np.broadcast_shapes(ae.shape[:-2], be.shape[:-2]))
    m, k, n = ae.shape[-2], ae.shape[-1], be.shape[-1]
    nb = math.prod(batch)

    def as3(e: Expr, rows: int, cols: int) -> Expr:
        lead = e.shape[:-2]
        if lead != batch and math.prod(lead) != 1:
            raise self.fail(node, f"batch dimensions {e.shape[:-2]} and {batch} broadcast "
                                  f"partially (not supported)")
        return _reshape(e, (math.prod(lead), rows, cols))

    a3 = as3(ae, m, k)
    bt = make_call("transpose", [as3(be, k, n)], axes=(0, 2, 1))
    y = make_call("nn.batch_matmul", [a3, bt])
    return _reshape(y, (*batch, m, n)) if nb else y


def op_MatMul(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    return _matmul(self, node, self.x(node), node.input[1])


def op_Gemm(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    ae = self.x(node)
    if a.get("transA", 0):
        ae = make_call("transpose", [ae], axes=(1, 0))
    if node.input[1] in self.consts:
        w = self.consts[node.input[1]] * alpha
        w = w if a.get("transB", 0) else w.T
        y: Expr = nn.dense(ae, self.param(node.input[1], np.ascontiguousarray(w)))
    else:
        be = self.x(node, 1)
        if a.get("transB", 0):
            be = make_call("transpose", [be], axes=(1, 0))
        self.env[f"{node.name}__B"] = be
        y = _matmul(self, node, ae, f"{node.name}__B")
        if alpha != 1.0:
            y = binary("multiply", y, self.param(f"{node.name}_alpha", np.array([alpha])))
    if self.has(node, 2) and beta != 0.0:
        if node.input[2] in self.consts:
            c = self.consts[node.input[2]] * beta
            if c.size == y.shape[1] and c.ndim <= 2 and (c.ndim < 2 or c.shape[0] == 1):
                return nn.bias_add(y, self.param(node.input[2], c.reshape(-1)), axis=-1)
            return binary("add", y, self.param(node.input[2], c))
        c_e = self.x(node, 2)
        if beta != 1.0:
            c_e = binary("multiply", c_e, self.param(f"{node.name}_beta", np.array([beta])))
        y = binary("add", y, c_e)
    return y


def op_Softmax(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    nd = len(x.shape)
    axis = int(a.get("axis", -1 if self.opset >= 13 else 1)) % nd
    if self.opset < 13 and axis != nd - 1:  # the old form: softmax of the flattened tail
        flat = _reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
        return _reshape(nn.softmax(flat, axis=1), x.shape)
    return nn.softmax(x, axis=axis)


def _reduction(kind: str) -> Any:
    def handler(self: Any, node: Any, a: dict[str, Any]) -> Expr:
        return _reduce(self, node, a, kind)

    return handler


def _reduce(self: Any, node: Any, a: dict[str, Any], kind: str) -> Expr:
    x = self.x(node)
    nd = len(x.shape)
    axes = _axes(self, node, a)
    if axes is None:
        if a.get("noop_with_empty_axes", 0):
            return x
        axes = list(range(nd))
    axes = sorted({d % nd for d in axes})
    keep = bool(a.get("keepdims", 1))
    if nd == 4 and axes == [2, 3] and keep and kind in ("mean", "max"):
        return (nn.global_avg_pool2d(x) if kind == "mean"
                else make_call("nn.global_max_pool2d", [x]))
    return make_call(kind, [x], axis=tuple(axes), keepdims=keep)


op_ReduceMean = _reduction("mean")
op_ReduceSum = _reduction("sum")
op_ReduceMax = _reduction("max")
op_ReduceMin = _reduction("min")


def op_Resize(self: Any, node: Any, a: dict[str, Any]) -> Call:
    x = self.x(node)
    if len(x.shape) != 4:
        raise self.fail(node, "only 4-D (NCHW) inputs are supported")
    method = a.get("mode", "nearest")
    mode = a.get("coordinate_transformation_mode", "half_pixel")
    nearest = a.get("nearest_mode", "round_prefer_floor")
    if method not in ("nearest", "linear") or mode not in (
            "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
        raise self.fail(node, f"mode {method!r} with coordinate_transformation_mode "
                              f"{mode!r} is not supported")
    if a.get("antialias", 0) or nearest not in ("floor", "round_prefer_ceil",
                                                 "round_prefer_floor", "ceil"):
        raise self.fail(node, f"antialias or nearest_mode {nearest!r} is not supported")
    scales = self.consts.get(node.input[2]) if self.has(node, 2) else None
    if scales is not None and scales.size == 4:
        if float(scales[0]) != 1.0 or float(scales[1]) != 1.0:
            raise self.fail(node, "only the spatial axes may be resized")
        sc = (float(scales[2]), float(scales[3]))
        size = (int(math.floor(x.shape[2] * sc[0])), int(math.floor(x.shape[3] * sc[1])))
    elif self.has(node, 3):
        sizes = [int(v) for v in self.const(node.input[3], node)]
        size = (sizes[2], sizes[3])
        sc = (size[0] / x.shape[2], size[1] / x.shape[3])
    else:
        raise self.fail(node, "needs constant scales or sizes")
    return make_call("image.resize2d", [x], size=size, scale=sc, method=method, mode=mode,
                     nearest_mode=nearest)


def op_Pad(self: Any, node: Any, a: dict[str, Any]) -> Expr:
    x = self.x(node)
    nd = len(x.shape)
    if a.get("mode", "constant") != "constant":
        raise self.fail(node, f"mode {a['mode']!r} (only constant padding is supported)")
    pads = [int(v) for v in (a["pads"] if "pads" in a else self.const(node.input[1], node))]
    value = float(a.get("value", 0.0))
    if self.has(node, 2):
        value = float(self.const(node.input[2], node).reshape(-1)[0])
    axes = ([int(v) % nd for v in self.const(node.input[3], node)] if self.has(node, 3)
            else list(range(nd)))
    before, after = [0] * nd, [0] * nd
    for k, ax in enumerate(axes):
        before[ax], after[ax] = pads[k], pads[k + len(axes)]
    if min(before + after) < 0:
        raise self.fail(node, "negative pads are not supported")
    return make_call("nn.pad", [x], pad_before=tuple(before), pad_after=tuple(after),
                     pad_value=value)
