"""Commutative reducers: ``comm_reducer`` and the built-in ``sum``, ``max``, ``min``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from templtune import dtype as dt
from templtune.errors import ExprError
from templtune.te.expr import (
    BinOpKind,
    CommReducer,
    IterKind,
    IterVar,
    PrimExpr,
    Reduce,
    Var,
    binary,
    const,
    convert,
)

__all__ = ["comm_reducer", "sum", "max", "min", "max_value", "min_value", "Reducer"]


def max_value(dtype: str) -> PrimExpr:
    """The largest value of ``dtype`` (``inf`` for floats)."""
    d = dt.parse(dtype)
    if d.code == "float":
        return const(float("inf"), dtype)
    if d.code == "bool":
        return const(True, dtype)
    if d.code == "uint":
        return const(2**d.bits - 1, dtype)
    return const(2 ** (d.bits - 1) - 1, dtype)


def min_value(dtype: str) -> PrimExpr:
    """The smallest value of ``dtype`` (``-inf`` for floats)."""
    d = dt.parse(dtype)
    if d.code == "float":
        return const(float("-inf"), dtype)
    if d.code == "bool":
        return const(False, dtype)
    if d.code == "uint":
        return const(0, dtype)
    return const(-(2 ** (d.bits - 1)), dtype)


class Reducer:
    """A reducer made by :func:`comm_reducer`. Call it as ``r(expr, axis, where=None,
    init=None)`` to reduce, or with plain expressions (``te.max(a, b)``) to combine them."""

    def __init__(self, fcombine: Callable[..., Any], fidentity: Callable[[str], Any],
                 name: str) -> None:
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def make_combiner(self, dtypes: Sequence[str]) -> CommReducer:
        lhs = tuple(Var(f"x{k}" if len(dtypes) > 1 else "x", d) for k, d in enumerate(dtypes))
        rhs = tuple(Var(f"y{k}" if len(dtypes) > 1 else "y", d) for k, d in enumerate(dtypes))
        if len(dtypes) == 1:
            res: Any = self.fcombine(lhs[0], rhs[0])
            ident: Any = self.fidentity(dtypes[0])
        else:
            res = self.fcombine(lhs, rhs)
            ident = self.fidentity(*dtypes)
        res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        ident = tuple(ident) if isinstance(ident, (tuple, list)) else (ident,)
        if len(res) != len(dtypes) or len(ident) != len(dtypes):
            raise ExprError(f"reducer {self.name}: combine/identity give {len(res)}/{len(ident)} "
                            f"values for {len(dtypes)} inputs")
        ident = tuple(convert(i) if not isinstance(i, (int, float))
                      else const(i, d) for i, d in zip(ident, dtypes))
        return CommReducer(lhs, rhs, tuple(convert(r) for r in res), ident, self.name)

    def __call__(self, expr: Any, axis: Any = None, where: Any = None, init: Any = None,
                 *args: Any) -> Any:
        is_axis = axis is None or isinstance(axis, IterVar) or (
            isinstance(axis, (list, tuple)) and all(isinstance(a, IterVar) for a in axis))
        if not is_axis:
            # elementwise use: te.max(a, b[, c ...])
            vals = [expr, axis] + ([where] if where is not None else []) + \
                   ([init] if init is not None else []) + list(args)
            out = convert(vals[0])
            for v in vals[1:]:
                out = self.fcombine(out, v)
            return out
        if axis is None:
            raise ExprError(f"{self.name}: give the reduction axis (axis=k or axis=[k1, k2])")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if a.iter_type is not IterKind.REDUCE:
                raise ExprError(f"{self.name}: axis {a.var.name} is not a reduce_axis")
        srcs = tuple(convert(e) for e in expr) if isinstance(expr, (tuple, list)) else (
            convert(expr),)
        comb = self.make_combiner([s.dtype for s in srcs])
        cond = const(True) if where is None else convert(where)
        inits: tuple[PrimExpr, ...] = ()
        if init is not None:
            inits = tuple(convert(i) for i in init) if isinstance(init, (tuple, list)) else (
                convert(init),)
        if len(srcs) == 1:
            return Reduce(comb, srcs, axes, cond, 0, inits)
        return tuple(Reduce(comb, srcs, axes, cond, k, inits) for k in range(len(srcs)))


def comm_reducer(fcombine: Callable[..., Any], fidentity: Callable[..., Any],
                 name: str = "reduce") -> Reducer:
    """Create a commutative reducer from ``fcombine(x, y)`` and ``fidentity(dtype)``.

    For multi-value reducers (argmax) ``fcombine`` takes and returns tuples and ``fidentity``
    takes one dtype per value.
    """
    return Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda d: const(0, d), name="sum")  # noqa: A001
max = comm_reducer(lambda x, y: binary(BinOpKind.MAX, x, y), min_value, name="max")  # noqa: A001
min = comm_reducer(lambda x, y: binary(BinOpKind.MIN, x, y), max_value, name="min")  # noqa: A001
