"""Operators whose values differ in dtype: ``take`` (rows picked by integer indices: a
transformer's embedding lookup of its token ids) and ``cast``.

``take`` clamps its indices, as Relay's default ``mode="clip"`` does: a negative index first
counts from the end (ONNX ``Gather``'s rule), then any index outside the axis reads its
nearest end. So a bad token id reads a valid row and never memory outside the table (ONNX
Runtime raises instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import te

from ..ir import Call, Expr, TensorType
from ..op import INJECTIVE, make_call, register_op

#: index dtypes ``take`` reads
INDEX_DTYPES = ("int32", "int64")
#: dtypes ``cast`` converts between
CAST_DTYPES = ("float32", "int32", "int64")


# ---- take -----------------------------------------------------------------------------------------
def _axis(nd: int, a: dict[str, Any]) -> int:
    axis = int(a["axis"])
    if not -nd <= axis < nd:
        raise ValueError(f"axis {axis} is out of range for {nd} dimensions")
    return axis % nd


def _take_infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    data, idx = t[0].shape, t[1].shape
    axis = _axis(len(data), a)
    return data[:axis] + idx + data[axis + 1:]


def _take_dtype(t: list[TensorType], a: dict[str, Any]) -> str:
    if t[1].dtype not in INDEX_DTYPES:
        raise ValueError(f"indices must be {' or '.join(INDEX_DTYPES)}, got {t[1].dtype!r}")
    return t[0].dtype


def _take_compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    data, idx = x
    shape = tuple(int(d) for d in data.shape)
    axis = _axis(len(shape), a)
    n, k = shape[axis], len(idx.shape)
    lo, hi = te.const(0, idx.dtype), te.const(n - 1, idx.dtype)

    def row(*i: Any) -> Any:
        v = idx[i[axis:axis + k]]
        # NOTE: clamped in the indices' own dtype, then narrowed: an int64 id past 2**31
        # must not wrap to a valid-looking row first
        v = te.min(te.max(te.select(v < lo, v + te.const(n, idx.dtype), v), lo), hi)
        return data[(*i[:axis], v.astype("int32"), *i[axis + k:])]

    out = shape[:axis] + tuple(int(d) for d in idx.shape) + shape[axis + 1:]
    return te.compute(out, row, name="T_take", tag="injective")


def _take_ref(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    data, idx = x
    axis = int(a["axis"]) % data.ndim
    n = data.shape[axis]
    idx = np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1)
    return np.take(data, idx, axis=axis)


def take(data: Expr, indices: Expr, axis: int = 0) -> Call:
    """The slices of ``data`` along ``axis`` that integer ``indices`` name
    (``relay.take(data, indices, axis)``, mode ``"clip"``; ``numpy.take`` with clamped
    indices).

    Parameters
    ----------
    data : Expr
        Any dtype; an embedding table ``[vocab, hidden]`` for a lookup.
    indices : Expr
        int32 or int64, any shape; a negative index counts from the end, then each is clamped
        into the axis.
    axis : int
        The axis of ``data`` the indices pick along (negative counts from the end).

    Returns
    -------
    Call
        ``data.shape[:axis] + indices.shape + data.shape[axis + 1:]``, ``data``'s dtype.

    Raises
    ------
    GraphError
        On indices of another dtype or an axis out of range.
    """
    return make_call("take", [data, indices], axis=int(axis))


register_op("take", INJECTIVE, _take_infer, _take_compute, _take_ref, builder=take,
            dtype=_take_dtype)


# ---- cast -----------------------------------------------------------------------------------------
def _cast_dtype(t: list[TensorType], a: dict[str, Any]) -> str:
    for d in (t[0].dtype, a["dtype"]):
        if d not in CAST_DTYPES:
            raise ValueError(f"cast supports {', '.join(CAST_DTYPES)}, not {d!r}")
    return str(a["dtype"])


def cast(data: Expr, dtype: str) -> Call:
    """``data`` converted to ``dtype`` (``relay.cast``): float to integer truncates toward
    zero, as C and numpy do for values in range.

    Raises
    ------
    GraphError
        On a dtype outside :data:`CAST_DTYPES`.
    """
    return make_call("cast", [data], dtype=str(dtype))


register_op("cast", INJECTIVE, lambda t, a: t[0].shape,
            lambda x, a: te.compute(tuple(x[0].shape), lambda *i: x[0][i].astype(a["dtype"]),
                                    name="T_cast", tag="elemwise"),
            lambda x, a: x[0].astype(a["dtype"]), builder=cast, dtype=_cast_dtype)
