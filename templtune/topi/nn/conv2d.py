"""2-D convolutions: ``conv2d_nchw``, ``conv2d_nhwc``, ``depthwise_conv2d_nchw``."""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.te.simplify import simplify
from templtune.topi.nn.pad import pad
from templtune.topi.utils import get_const_int, get_pad_tuple, pair

__all__ = ["conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "group_conv2d_nchw",
           "conv_out_size", "group_merge", "group_oc_block_ok", "group_blocks_ok"]


def conv_out_size(size: Any, k: int, pad_lo: int, pad_hi: int, stride: int, dilation: int
                  ) -> Any:
    """Output extent of a convolution along one dimension."""
    dk = (k - 1) * dilation + 1
    out = simplify((size + pad_lo + pad_hi - dk) // stride + 1)
    if isinstance(out, te.PrimExpr) and hasattr(out, "value") and out.value <= 0:
        raise ExprError(f"convolution output is empty: input {size}, kernel {k} (dilated {dk}), "
                        f"padding {pad_lo}+{pad_hi}, stride {stride}")
    return out


def _params(stride: Any, dilation: Any, padding: Any, kh: int, kw: int
            ) -> tuple[int, int, int, int, tuple[int, int, int, int]]:
    sh, sw = (get_const_int(s) for s in pair(stride, "stride"))
    dh, dw = (get_const_int(d) for d in pair(dilation, "dilation"))
    if min(sh, sw, dh, dw) < 1:
        raise ExprError(f"stride {stride} and dilation {dilation} must be positive")
    pads = get_pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    return sh, sw, dh, dw, pads


def _geometry(stride: Any, dilation: Any, padding: Any, kh: int, kw: int, in_h: Any, in_w: Any
              ) -> tuple[int, int, int, int, tuple[int, int, int, int], Any, Any]:
    """:func:`_params` plus the output height and width."""
    sh, sw, dh, dw, (pt, pl, pb, pr) = _params(stride, dilation, padding, kh, kw)
    out_h = conv_out_size(in_h, kh, pt, pb, sh, dh)
    out_w = conv_out_size(in_w, kw, pl, pr, sw, dw)
    return sh, sw, dh, dw, (pt, pl, pb, pr), out_h, out_w


def conv2d_nchw(Input: te.Tensor, Filter: te.Tensor, stride: Any, padding: Any,
                dilation: Any = 1, out_dtype: str | None = None) -> te.Tensor:
    """Convolution in NCHW layout with an OIHW filter.

    Parameters
    ----------
    Input : Tensor
        ``[batch, in_channel, in_height, in_width]``.
    Filter : Tensor
        ``[num_filter, in_channel, filter_height, filter_width]``.
    stride, dilation : int or (int, int)
    padding : int, (h, w), (top, left, bottom, right), "SAME" or "VALID"
    out_dtype : str, optional
        Accumulation dtype (default: the input's).

    Returns
    -------
    Tensor
        ``conv2d_nchw`` (tag ``"conv2d_nchw"``, axes ``nn, ff, yy, xx``, reduce ``rc, ry, rx``)
        reading the padded input ``pad_temp``.
    """
    if len(Input.shape) != 4 or len(Filter.shape) != 4:
        raise ExprError("conv2d_nchw: Input and Filter must be 4-D (NCHW / OIHW)")
    out_dtype = out_dtype or Input.dtype
    batch, in_c, in_h, in_w = Input.shape
    num_f, f_c, kh_e, kw_e = Filter.shape
    kh, kw = get_const_int(kh_e), get_const_int(kw_e)
    sh, sw, dh, dw, (pt, pl, pb, pr), out_h, out_w = _geometry(stride, dilation, padding, kh,
                                                               kw, in_h, in_w)
    temp = pad(Input, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_temp")
    rc = te.reduce_axis((0, f_c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (batch, num_f, out_h, out_w),
        lambda nn, ff, yy, xx: te.sum(
            temp[nn, rc, yy * sh + ry * dh, xx * sw + rx * dw].astype(out_dtype)
            * Filter[ff, rc, ry, rx].astype(out_dtype), axis=[rc, ry, rx]),
        name="conv2d_nchw", tag="conv2d_nchw")


def conv2d_nhwc(Input: te.Tensor, Filter: te.Tensor, stride: Any, padding: Any,
                dilation: Any = 1, out_dtype: str | None = None) -> te.Tensor:
    """Convolution in NHWC layout with an HWIO filter ``[kh, kw, in_channel, num_filter]``.

    Returns ``Conv2dOutput`` (tag ``"conv2d_nhwc"``, axes ``nn, yy, xx, ff``) reading
    ``PaddedInput``.
    """
    if len(Input.shape) != 4 or len(Filter.shape) != 4:
        raise ExprError("conv2d_nhwc: Input and Filter must be 4-D (NHWC / HWIO)")
    out_dtype = out_dtype or Input.dtype
    batch, in_h, in_w, in_c = Input.shape
    kh_e, kw_e, f_c, num_f = Filter.shape
    kh, kw = get_const_int(kh_e), get_const_int(kw_e)
    sh, sw, dh, dw, (pt, pl, pb, pr), out_h, out_w = _geometry(stride, dilation, padding, kh,
                                                               kw, in_h, in_w)
    padded = pad(Input, (0, pt, pl, 0), (0, pb, pr, 0), name="PaddedInput")
    rc = te.reduce_axis((0, f_c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (batch, out_h, out_w, num_f),
        lambda nn, yy, xx, ff: te.sum(
            padded[nn, yy * sh + ry * dh, xx * sw + rx * dw, rc].astype(out_dtype)
            * Filter[ry, rx, rc, ff].astype(out_dtype), axis=[ry, rx, rc]),
        name="Conv2dOutput", tag="conv2d_nhwc")


def depthwise_conv2d_nchw(Input: te.Tensor, Filter: te.Tensor, stride: Any, padding: Any,
                          dilation: Any = 1, out_dtype: str | None = None) -> te.Tensor:
    """Depthwise convolution, NCHW input and filter ``[in_channel, multiplier, kh, kw]``;
    output channel ``c`` reads input channel ``c // multiplier``.

    Returns ``DepthwiseConv2d`` (tag ``"depthwise_conv2d_nchw"``) reading ``PaddedInput``.
    """
    if len(Input.shape) != 4 or len(Filter.shape) != 4:
        raise ExprError("depthwise_conv2d_nchw: Input and Filter must be 4-D")
    out_dtype = out_dtype or Input.dtype
    batch, in_c, in_h, in_w = Input.shape
    f_c, mult_e, kh_e, kw_e = Filter.shape
    mult, kh, kw = get_const_int(mult_e), get_const_int(kh_e), get_const_int(kw_e)
    sh, sw, dh, dw, (pt, pl, pb, pr), out_h, out_w = _geometry(stride, dilation, padding, kh,
                                                               kw, in_h, in_w)
    padded = pad(Input, (0, 0, pt, pl), (0, 0, pb, pr), name="PaddedInput")
    di = te.reduce_axis((0, kh), name="di")
    dj = te.reduce_axis((0, kw), name="dj")
    return te.compute(
        (batch, simplify(in_c * mult), out_h, out_w),
        lambda b, c, i, j: te.sum(
            padded[b, c // mult, i * sh + di * dh, j * sw + dj * dw].astype(out_dtype)
            * Filter[c // mult, c % mult, di, dj].astype(out_dtype), axis=[di, dj]),
        name="DepthwiseConv2d", tag="depthwise_conv2d_nchw")


def group_conv2d_nchw(Input: te.Tensor, Filter: te.Tensor, stride: Any, padding: Any,
                      dilation: Any, groups: int, out_dtype: str | None = None) -> te.Tensor:
    """Grouped convolution: filter ``[num_filter, in_channel // groups, kh, kw]``; output channel
    ``ff`` reads input channels of group ``ff // (num_filter // groups)``.

    Returns ``group_conv2d_nchw`` (tag ``"group_conv2d_nchw"``) reading ``pad_temp``.
    """
    out_dtype = out_dtype or Input.dtype
    batch, in_c, in_h, in_w = Input.shape
    num_f, f_c, kh_e, kw_e = Filter.shape
    kh, kw = get_const_int(kh_e), get_const_int(kw_e)
    g = int(groups)
    ci, co, fc = get_const_int(in_c), get_const_int(num_f), get_const_int(f_c)
    if g < 1 or ci % g or co % g or fc * g != ci:
        raise ExprError(f"group_conv2d_nchw: {ci} input / {co} output channels, filter "
                        f"in-channels {fc}, groups {g} do not fit")
    sh, sw, dh, dw, (pt, pl, pb, pr), out_h, out_w = _geometry(stride, dilation, padding, kh,
                                                               kw, in_h, in_w)
    temp = pad(Input, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_temp")
    rc = te.reduce_axis((0, fc), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    per = co // g
    return te.compute(
        (batch, num_f, out_h, out_w),
        lambda nn, ff, yy, xx: te.sum(
            temp[nn, ff // per * fc + rc, yy * sh + ry * dh, xx * sw + rx * dw].astype(out_dtype)
            * Filter[ff, rc, ry, rx].astype(out_dtype), axis=[rc, ry, rx]),
        name="group_conv2d_nchw", tag="group_conv2d_nchw")


def group_merge(groups: int, out_channels: int, oc_bn: int) -> int:
    """The whole groups an output block of ``oc_bn`` channels of a grouped convolution holds
    (1: it lies within one group), in the blocked (NCHW[x]c) layouts."""
    og = out_channels // groups
    return 1 if oc_bn <= og else oc_bn // og


def group_oc_block_ok(groups: int, co: int, oc_bn: int) -> bool:
    """Whether an output block of ``oc_bn`` channels lies within one group of ``co / groups``
    or holds whole groups of a grouped convolution (their count dividing ``groups``)."""
    og = co // groups
    return og % oc_bn == 0 or (oc_bn % og == 0 and groups % (oc_bn // og) == 0)


def group_blocks_ok(groups: int, ci: int, co: int, ic_bn: int, oc_bn: int) -> bool:
    """Whether a convolution of ``ci -> co`` channels in ``groups`` groups runs at channel
    blocks ``(ic_bn, oc_bn)``: an output block within a group reads whole input blocks of
    it; one of ``m > 1`` whole groups reads the one input block of their channels (its
    kernel split by group: each output lane weighs its own group's inputs)."""
    if groups == 1:
        return True
    if not group_oc_block_ok(groups, co, oc_bn):
        return False
    m, cg = group_merge(groups, co, oc_bn), ci // groups
    return ic_bn == m * cg if m > 1 else cg % ic_bn == 0
