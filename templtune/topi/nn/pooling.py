"""2-D max / average pooling."""

from __future__ import annotations

import re
from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.te.expr import FloatImm, IntImm, PrimExpr
from templtune.topi.nn.pad import pad
from templtune.topi.utils import get_const_int, get_const_tuple, get_pad_tuple, pair

__all__ = ["pool2d", "adaptive_pool2d", "global_pool2d"]



def _spatial_axes(layout: str, ndim: int, who: str) -> tuple[int, int]:
    """The (H, W) axes of ``layout``: NCHW, NHWC, or the blocked NCHW[x]c (5-D)."""
    if layout == "NCHW" and ndim == 4:
        return 2, 3
    if layout == "NHWC" and ndim == 4:
        return 1, 2
    if ndim == 5 and re.fullmatch(r"NCHW\d+c", layout):
        return 2, 3
    raise ExprError(f"{who}: supports 4-D NCHW / NHWC or 5-D NCHW[x]c data, got layout "
                    f"{layout!r} on {ndim}-D data")


def _value(e: PrimExpr) -> int | float:
    """The Python value of a constant (a dtype's minimum, for max-pool padding)."""
    assert isinstance(e, (IntImm, FloatImm))
    return e.value

def pool2d(data: te.Tensor, kernel: Any, stride: Any, padding: Any, pool_type: str = "max",
           layout: str = "NCHW", ceil_mode: bool = False, count_include_pad: bool = True,
           dilation: Any = 1) -> te.Tensor:
    """Pooling over the H and W dimensions of ``data``.

    Parameters
    ----------
    data : Tensor
        4-D, ``layout`` "NCHW" or "NHWC"; or 5-D blocked "NCHW16c" (pooled like NCHW).
    kernel, stride, dilation : int or (int, int)
    padding : int, (h, w) or (top, left, bottom, right)
    pool_type : "max" or "avg"
    ceil_mode : bool
        Round the output size up (extra padding at the bottom/right).
    count_include_pad : bool
        For "avg": divide by the full window size (True) or by the number of real elements.

    Returns
    -------
    Tensor
        ``pool_max`` (tag ``"pool_max"``) or ``pool_avg`` (tag ``"pool_avg"``).
    """
    if pool_type not in ("max", "avg"):
        raise ExprError(f"pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    hax, wax = _spatial_axes(layout, len(data.shape), "pool2d")
    kh, kw = (get_const_int(k) for k in pair(kernel, "kernel"))
    sh, sw = (get_const_int(s) for s in pair(stride, "stride"))
    dh, dw = (get_const_int(d) for d in pair(dilation, "dilation"))
    pt, pl, pb, pr = get_pad_tuple(padding, (kh, kw))
    shape = get_const_tuple(data.shape)
    in_h, in_w = shape[hax], shape[wax]
    if not isinstance(in_h, int) or not isinstance(in_w, int):
        raise ExprError("pool2d: spatial dimensions must be constant")
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1

    def out_size(n: int, k: int, lo: int, hi: int, s: int) -> tuple[int, int]:
        span = n + lo + hi - k
        o = (-(-span // s) if ceil_mode else span // s) + 1
        extra = max(0, (o - 1) * s + k - (n + lo + hi))
        return o, extra

    out_h, eh = out_size(in_h, ekh, pt, pb, sh)
    out_w, ew = out_size(in_w, ekw, pl, pr, sw)
    if out_h <= 0 or out_w <= 0:
        raise ExprError(f"pool2d: empty output for input {in_h}x{in_w}, kernel {kh}x{kw}")
    before = [0] * len(shape)
    after = [0] * len(shape)
    before[hax], before[wax], after[hax], after[wax] = pt, pl, pb + eh, pr + ew
    pad_val = _value(te.min_value(data.dtype)) if pool_type == "max" else 0.0
    padded = pad(data, before, after, pad_value=pad_val, name="pad_temp") \
        if any(before) or any(after) else data
    ry = te.reduce_axis((0, kh), name="rv0")
    rx = te.reduce_axis((0, kw), name="rv1")
    out_shape: list[Any] = list(data.shape)
    out_shape[hax], out_shape[wax] = out_h, out_w

    def idx(i: tuple[Any, ...]) -> tuple[Any, ...]:
        ind = list(i)
        ind[hax] = i[hax] * sh + ry * dh
        ind[wax] = i[wax] * sw + rx * dw
        return tuple(ind)

    names = tuple(f"ax{k}" for k in range(len(shape)))
    if pool_type == "max":
        return te.compute(tuple(out_shape), _named(lambda *i: te.max(padded[idx(i)],
                                                                        axis=[ry, rx]), names),
                          name="pool_max", tag="pool_max")
    acc_dtype = data.dtype
    psum = te.compute(tuple(out_shape), _named(lambda *i: te.sum(padded[idx(i)],
                                                                   axis=[ry, rx]), names),
                      name="pool_sum", tag="pool_sum")

    def avg(*i: Any) -> PrimExpr:
        if count_include_pad:
            div: Any = te.const(kh * kw, acc_dtype)
        else:
            hs = i[hax] * sh - pt
            ws = i[wax] * sw - pl
            # taps t in [0, k) with 0 <= start + t*d < n: from ceil(-start/d) to (n-1-start)//d
            nh = te.min(kh - 1, (in_h - 1 - hs) // dh) - te.max(0, 0 - hs // dh) + 1
            nw = te.min(kw - 1, (in_w - 1 - ws) // dw) - te.max(0, 0 - ws // dw) + 1
            div = te.max(nh * nw, 1).astype(acc_dtype)
        return psum[i] / div

    return te.compute(tuple(out_shape), _named(avg, names), name="pool_avg", tag="pool_avg")


def _named(fn: Any, names: tuple[str, ...]) -> Any:
    from templtune.topi.utils import axis_names

    return axis_names(fn, len(names))


def adaptive_pool2d(data: te.Tensor, output_size: Any, pool_type: str = "avg",
                    layout: str = "NCHW") -> te.Tensor:
    """Adaptive pooling to ``output_size`` (int or pair): output cell ``o`` of a dimension of
    extent ``n`` covers ``[floor(o*n/osz), ceil((o+1)*n/osz))``.

    Returns a compute named ``tensor`` (tag ``"adaptive_pool_max"`` / ``"adaptive_pool_avg"``).
    """
    if pool_type not in ("max", "avg"):
        raise ExprError(f"adaptive_pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    hax, wax = _spatial_axes(layout, len(data.shape), "adaptive_pool2d")
    shape = get_const_tuple(data.shape)
    in_h, in_w = shape[hax], shape[wax]
    oh, ow = (get_const_int(x) for x in pair(output_size, "output_size"))
    if not isinstance(in_h, int) or not isinstance(in_w, int) or oh < 1 or ow < 1:
        raise ExprError("adaptive_pool2d: needs constant spatial dimensions and output size >= 1")

    def window(n: int, osz: int) -> int:
        return max(-(-(o + 1) * n // osz) - (o * n) // osz for o in range(osz))

    kh, kw = window(in_h, oh), window(in_w, ow)
    rh = te.reduce_axis((0, kh), name="rv0")
    rw = te.reduce_axis((0, kw), name="rv1")
    out_shape: list[Any] = list(data.shape)
    out_shape[hax], out_shape[wax] = oh, ow

    def bounds(o: Any, n: int, osz: int) -> tuple[Any, Any]:
        return (o * n) // osz, ((o + 1) * n + osz - 1) // osz

    # NOTE: where the cells split a dimension evenly (global pooling) every window is whole:
    # no bounds test, so the reduction vectorizes instead of running lane by lane. A whole
    # plane with W innermost (NCHW) is one reduction over contiguous values, which the
    # default schedule factors into lane-wide partial sums.
    even = in_h % oh == 0 and in_w % ow == 0
    flat = te.reduce_axis((0, in_h * in_w), name="rv") if (
        even and oh == ow == 1 and wax == len(shape) - 1) else None
    raxes = [rh, rw] if flat is None else [flat]

    def src(i: tuple[Any, ...]) -> tuple[Any, Any]:
        hs, he = bounds(i[hax], in_h, oh)
        ws, we = bounds(i[wax], in_w, ow)
        ind = list(i)
        if flat is not None:
            ind[hax], ind[wax] = flat // in_w, flat % in_w
            return data[tuple(ind)], None
        ind[hax], ind[wax] = hs + rh, ws + rw
        return data[tuple(ind)], None if even else te.all(hs + rh < he, ws + rw < we)

    if pool_type == "max":
        def fmax(*i: Any) -> PrimExpr:
            v, cond = src(i)
            return te.max(v, axis=raxes, where=cond)

        return te.compute(tuple(out_shape), _named(fmax, ("ax",) * len(shape)), name="tensor",
                          tag="adaptive_pool_max")

    def fsum(*i: Any) -> PrimExpr:
        v, cond = src(i)
        return te.sum(v, axis=raxes, where=cond)

    psum = te.compute(tuple(out_shape), _named(fsum, ("ax",) * len(shape)), name="tensor",
                      tag="adaptive_pool_sum")

    def favg(*i: Any) -> PrimExpr:
        if even:
            return psum[i] / te.const(float(kh * kw), data.dtype)
        hs, he = bounds(i[hax], in_h, oh)
        ws, we = bounds(i[wax], in_w, ow)
        return psum[i] / ((he - hs) * (we - ws)).astype(data.dtype)

    return te.compute(tuple(out_shape), _named(favg, ("ax",) * len(shape)), name="tensor",
                      tag="adaptive_pool_avg")


def global_pool2d(data: te.Tensor, pool_type: str = "avg", layout: str = "NCHW") -> te.Tensor:
    """Pool each channel's whole H x W plane to one value."""
    return adaptive_pool2d(data, 1, pool_type, layout)
