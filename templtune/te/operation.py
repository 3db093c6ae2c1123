"""Constructors of tensors and axes: ``placeholder``, ``compute``, ``reduce_axis``,
``thread_axis``, ``var``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, overload

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.expr import (
    IntImm,
    IterKind,
    IterVar,
    PrimExpr,
    Range,
    Reduce,
    Var,
    const,
    convert,
)
from templtune.te.functor import post_order
from templtune.te.tensor import ComputeOp, PlaceholderOp, Tensor, TensorSlice

__all__ = ["placeholder", "compute", "reduce_axis", "thread_axis", "var", "to_shape"]


def to_shape(shape: Any, what: str = "shape") -> tuple[PrimExpr, ...]:
    """Normalise a shape (int, tuple/list of ints or integer expressions) and check it."""
    if isinstance(shape, (int, PrimExpr)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ExprError(f"{what} must be a tuple of integers or integer expressions, got {shape!r}")
    out: list[PrimExpr] = []
    for i, s in enumerate(shape):
        if isinstance(s, bool):
            raise ExprError(f"{what}[{i}] = {s!r} is not an integer")
        if hasattr(s, "dtype") and hasattr(s, "item") and not isinstance(s, PrimExpr):
            s = s.item()  # numpy integer -> Python int (so the dimension stays int32)
            if not isinstance(s, (int, float)) or isinstance(s, bool):
                raise ExprError(f"{what}[{i}] = {s!r} is not an integer")
        if isinstance(s, float):
            s = _integral(s, f"{what}[{i}]")
        try:
            e = convert(s)
        except ExprError as err:
            raise ExprError(f"{what}[{i}] = {s!r} is not an integer expression") from err
        if not dt.is_int(e.dtype):
            raise ExprError(f"{what}[{i}] = {s} has dtype {e.dtype}, expected an integer")
        if isinstance(e, IntImm) and e.value < 0:
            raise ExprError(f"{what}[{i}] = {e.value} is negative")
        out.append(e)
    return tuple(out)


def _integral(x: float, what: str) -> int:
    """An integral float (``N / bn`` in Python 3) as the int it equals. NOTE: TVM truncates any
    float silently; a fractional extent is refused here, since truncating it drops elements."""
    if not math.isfinite(x) or x != int(x):
        raise ExprError(f"{what} = {x!r} is not an integral value (a shape needs whole numbers; "
                        f"use // for integer division)")
    return int(x)


def _range(dom: Any, what: str) -> Range:
    if isinstance(dom, Range):
        return dom
    if isinstance(dom, (tuple, list)) and len(dom) == 2:
        lo, hi = (convert(_integral(x, what) if isinstance(x, float) else x) for x in dom)
        if isinstance(lo, IntImm) and isinstance(hi, IntImm):
            if hi.value < lo.value:
                raise ExprError(f"{what} domain {tuple(dom)} is empty (max < min)")
            return Range(lo, const(hi.value - lo.value, hi.dtype))
        return Range(lo, hi - lo)
    raise ExprError(f"{what} domain must be a (min, max_exclusive) tuple or a Range, got {dom!r}")


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` and ``dtype``.

    Parameters
    ----------
    shape : tuple of int or PrimExpr
    dtype : str
    name : str

    Returns
    -------
    Tensor
    """
    dt.parse(dtype)
    return PlaceholderOp(name, to_shape(shape), dtype).output(0)


def var(name: str = "tindex", dtype: str = "int32") -> Var:
    """A scalar symbolic variable."""
    dt.parse(dtype)
    return Var(name, dtype)


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom`` = ``(min, max_exclusive)`` or a :class:`Range`."""
    return IterVar(_range(dom, f"reduce_axis {name}"), Var(name, "int32"), IterKind.REDUCE)


def thread_axis(dom_or_tag: Any = None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis: ``thread_axis("threadIdx.x")`` or ``thread_axis((0, 2), "vthread",
    name="vx")``."""
    if isinstance(dom_or_tag, str):
        dom, tag = None, dom_or_tag
    else:
        dom = None if dom_or_tag is None else _range(dom_or_tag, "thread_axis")
    if not tag:
        raise ExprError("thread_axis needs a thread tag such as 'threadIdx.x' or 'vthread'")
    return IterVar(dom, Var(name or tag, "int32"), IterKind.THREAD_INDEX, tag)


def _axis_names(fcompute: Callable[..., Any], ndim: int) -> list[str]:
    try:
        sig = inspect.signature(fcompute)
    except (TypeError, ValueError):
        return [f"i{k}" for k in range(ndim)]
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{k}" for k in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
             and p.default is p.empty]
    if len(names) != ndim:
        raise ExprError(
            f"compute: fcompute takes {len(names)} index arguments ({', '.join(names)}) but the "
            f"shape has {ndim} dimensions"
        )
    return names


@overload
def compute(shape: Any, fcompute: Callable[..., list[Any] | tuple[Any, ...]], name: str = ...,
            tag: str = ..., attrs: dict[str, Any] | None = ...) -> list[Tensor]: ...


@overload
def compute(shape: Any, fcompute: Callable[..., Any], name: str = ..., tag: str = ...,
            attrs: dict[str, Any] | None = ...) -> Tensor: ...


def compute(
    shape: Any,
    fcompute: Callable[..., Any],
    name: str = "compute",
    tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Tensor | list[Tensor]:
    """Declare ``out[i, j, ...] = fcompute(i, j, ...)`` over ``shape``.

    Parameters
    ----------
    shape : tuple of int or PrimExpr
    fcompute : callable
        Takes one :class:`IterVar` per dimension (named after its parameters, or ``i0, i1, ...``
        for ``*args``) and returns an expression, a reduction (``te.sum(...)``), or a tuple of
        them for a multi-output compute.
    name, tag : str
    attrs : dict, optional

    Returns
    -------
    Tensor, or a list of Tensors for a multi-output compute.
    """
    shp = to_shape(shape)
    names = _axis_names(fcompute, len(shp))
    axis = tuple(IterVar(Range(const(0, s.dtype), s), Var(n, s.dtype), IterKind.DATA_PAR)
                 for n, s in zip(names, shp))
    body = fcompute(*axis)
    multi = isinstance(body, (tuple, list))
    for b in (body if multi else (body,)):
        if isinstance(b, TensorSlice):
            raise ExprError(f"compute {name}: tensor {b.tensor.name} has "
                            f"{len(b.tensor.shape)} dimensions, indexed with {len(b.indices)}")
    bodies = tuple(convert(b) for b in (body if multi else (body,)))
    if not bodies:
        raise ExprError(f"compute {name}: fcompute returned no expression")
    reduce_axes: tuple[IterVar, ...] = ()
    for k, b in enumerate(bodies):
        for n in post_order(b):
            if isinstance(n, Reduce) and n is not b:
                raise ExprError(f"compute {name}: a reduction must be the whole body, found one "
                                f"nested inside {b}")
        if isinstance(b, Reduce):
            if k and reduce_axes and b.axis != reduce_axes:
                raise ExprError(f"compute {name}: all outputs must reduce over the same axes")
            reduce_axes = b.axis
        elif reduce_axes:
            raise ExprError(f"compute {name}: outputs mix reductions and plain expressions")
    op = ComputeOp(name, tag, tuple(sorted((attrs or {}).items())), axis, reduce_axes, bodies)
    outs = [op.output(i) for i in range(op.num_outputs)]
    return outs if multi else outs[0]


def const_shape(t: Tensor | Sequence[Any]) -> tuple[int, ...]:
    """The shape of a tensor (or a shape) as Python ints; raise when symbolic."""
    shape = t.shape if isinstance(t, Tensor) else t
    out = []
    for s in shape:
        e = convert(s)
        if not isinstance(e, IntImm):
            raise ExprError(f"shape {tuple(str(x) for x in shape)} is not constant")
        out.append(e.value)
    return tuple(out)
