"""3-D operators (NCDHW data, OIDHW kernels) for video networks such as ResNet-3D:
``nn.conv3d``, ``nn.max_pool3d``, ``nn.avg_pool3d`` and ``nn.global_avg_pool3d``. Registered
into :data:`templtune.graph.op.OPS` on import; compiled with the default schedule (no template).

Padding is ``(front, top, left, back, bottom, right)``; pools exclude padding from the average.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from templtune import te, topi
from templtune.topi.utils import get_const_int

from .ir import TensorType
from .op import ANCHOR, _out, _register


def _window(a: dict[str, Any], shape: tuple[int, ...], k: tuple[int, int, int]) -> tuple[int, ...]:
    pad, st = a["padding"], a["strides"]
    return tuple(_out(shape[2 + d], k[d], pad[d], pad[3 + d], st[d]) for d in range(3))


def _conv3d_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    (n, c, *_), (o, ci, *k) = t[0].shape, t[1].shape
    if ci != c:
        raise ValueError(f"kernel takes {ci} channels, data has {c}")
    return (n, o, *_window(a, t[0].shape, tuple(k)))  # type: ignore[arg-type]


def _conv3d_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, w = x
    pad, (sd, sh, sw) = a["padding"], a["strides"]
    shape = _conv3d_infer([TensorType(tuple(get_const_int(s) for s in t.shape),
                                      t.dtype) for t in x], a)
    _, ci, kd, kh, kw = (get_const_int(s) for s in w.shape)
    p = topi.nn.pad(data, (0, 0, *pad[:3]), (0, 0, *pad[3:]), name="pad_temp") \
        if any(pad) else data
    rc, rd = te.reduce_axis((0, ci), name="rc"), te.reduce_axis((0, kd), name="rd")
    rh, rw = te.reduce_axis((0, kh), name="rh"), te.reduce_axis((0, kw), name="rw")
    return te.compute(shape, lambda n, f, z, y, xx: te.sum(
        p[n, rc, z * sd + rd, y * sh + rh, xx * sw + rw] * w[f, rc, rd, rh, rw],
        axis=[rc, rd, rh, rw]), name="conv3d_ncdhw", tag="conv3d_ncdhw")


def _conv3d_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data, w = x
    pad, st = a["padding"], a["strides"]
    p = np.pad(data.astype(np.float64), [(0, 0), (0, 0)] + [(pad[d], pad[3 + d]) for d in range(3)])
    out_sp = _window(a, data.shape, w.shape[2:])
    out = np.zeros((data.shape[0], w.shape[0], *out_sp))
    for dz, dy, dx in itertools.product(*(range(k) for k in w.shape[2:])):
        win = p[:, :, dz:dz + st[0] * out_sp[0]:st[0], dy:dy + st[1] * out_sp[1]:st[1],
                dx:dx + st[2] * out_sp[2]:st[2]]
        out += np.einsum("ncdhw,oc->nodhw", win, w[:, :, dz, dy, dx].astype(np.float64))
    return out.astype(data.dtype)


_register("nn.conv3d", ANCHOR, _conv3d_infer, _conv3d_compute, _conv3d_ref)


def _pool_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    return (*t[0].shape[:2], *_window(a, t[0].shape, a["pool_size"]))


def _pool3d(kind: str) -> tuple[Any, Any]:
    def compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
        data = x[0]
        dims = tuple(get_const_int(s) for s in data.shape)
        shape = _pool_infer([TensorType(dims, data.dtype)], a)
        pad, st, k = a["padding"], a["strides"], a["pool_size"]
        r = [te.reduce_axis((0, k[d]), name=f"r{d}") for d in range(3)]

        def at(i: tuple[Any, ...], d: int) -> Any:
            return i[d] * st[d] + r[d] - pad[d]

        def inside(i: tuple[Any, ...]) -> Any:
            return te.all(*(c for d in range(3) for c in (at(i, d) >= 0,
                                                          at(i, d) < dims[2 + d])))

        def load(n: Any, c: Any, i: tuple[Any, ...]) -> Any:
            return data[n, c, at(i, 0), at(i, 1), at(i, 2)]

        if kind == "max":
            low = te.min_value(data.dtype)
            return te.compute(shape, lambda n, c, *i: te.max(
                te.if_then_else(inside(i), load(n, c, i), low), axis=r), name="pool3d_max")
        zero = te.const(0.0, data.dtype)
        total = te.compute(shape, lambda n, c, *i: te.sum(
            te.if_then_else(inside(i), load(n, c, i), zero), axis=r), name="pool3d_sum")

        def count(i: tuple[Any, ...]) -> Any:
            c = te.const(1, "int32")
            for d in range(3):
                lo = te.max(i[d] * st[d] - pad[d], 0)
                hi = te.min(i[d] * st[d] - pad[d] + k[d], dims[2 + d])
                c = c * (hi - lo)
            return c

        return te.compute(shape, lambda n, c, *i: total[(n, c, *i)] / te.cast(
            count(i), data.dtype), name="pool3d_avg", tag="elemwise")

    def reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
        data = x[0].astype(np.float64)
        pad, st, k = a["padding"], a["strides"], a["pool_size"]
        fill = -np.inf if kind == "max" else 0.0
        p = np.pad(data, [(0, 0), (0, 0)] + [(pad[d], pad[3 + d]) for d in range(3)],
                   constant_values=fill)
        ones = np.pad(np.ones(data.shape[2:]), [(pad[d], pad[3 + d]) for d in range(3)])
        out_sp = _window(a, data.shape, k)
        out = np.full((*data.shape[:2], *out_sp), fill)
        cnt = np.zeros(out_sp)
        for dz, dy, dx in itertools.product(*(range(kk) for kk in k)):
            sl = tuple(slice(o, o + s * n, s) for o, s, n in zip((dz, dy, dx), st, out_sp))
            win = p[(slice(None), slice(None), *sl)]
            out = np.maximum(out, win) if kind == "max" else out + win
            cnt += ones[sl]
        return (out if kind == "max" else out / cnt).astype(x[0].dtype)

    return compute, reference


_register("nn.max_pool3d", ANCHOR, _pool_infer, *_pool3d("max"))
_register("nn.avg_pool3d", ANCHOR, _pool_infer, *_pool3d("avg"))


def _gap3d_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data = x[0]
    n, c, *sp = (get_const_int(s) for s in data.shape)
    r = [te.reduce_axis((0, s), name=f"r{d}") for d, s in enumerate(sp)]
    total = te.compute((n, c, 1, 1, 1), lambda i, j, *_: te.sum(data[i, j, r[0], r[1], r[2]],
                                                                 axis=r), name="gap3d_sum")
    scale = te.const(1.0 / float(np.prod(sp)), data.dtype)
    return te.compute(total.shape, lambda *i: total[i] * scale, name="gap3d", tag="elemwise")


_register("nn.global_avg_pool3d", ANCHOR, lambda t, a: (*t[0].shape[:2], 1, 1, 1),
          _gap3d_compute,
          lambda x, a: x[0].mean(axis=(2, 3, 4), keepdims=True,
                                 dtype=np.float64).astype(x[0].dtype))
