"""Fully connected layer."""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.errors import ExprError
from templtune.topi import tag

__all__ = ["dense", "batch_matmul", "batch_flatten"]


def dense(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
          out_dtype: str | None = None) -> te.Tensor:
    """``data @ weight.T (+ bias)``.

    Parameters
    ----------
    data : Tensor
        ``[batch, in_dim]``.
    weight : Tensor
        ``[out_dim, in_dim]``.
    bias : Tensor, optional
        ``[out_dim]``.
    out_dtype : str, optional
        Accumulation/output dtype (default: ``data.dtype``).

    Returns
    -------
    Tensor
        ``T_dense`` (tag ``"dense"``), or ``T_add`` on top of it when ``bias`` is given.
    """
    if len(data.shape) != 2 or len(weight.shape) != 2:
        raise ExprError("dense: data and weight must be 2-D")
    out_dtype = out_dtype or data.dtype
    batch, in_dim = data.shape
    out_dim, _ = weight.shape
    k = te.reduce_axis((0, in_dim), name="k")
    mat = te.compute(
        (batch, out_dim),
        lambda i, j: te.sum(data[i, k].astype(out_dtype) * weight[j, k].astype(out_dtype),
                            axis=k),
        name="T_dense", tag="dense")
    if bias is None:
        return mat
    return te.compute((batch, out_dim), lambda i, j: mat[i, j] + bias[j].astype(out_dtype),
                      name="T_add", tag=tag.BROADCAST)


def batch_matmul(x: te.Tensor, y: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """``out[b, i, j] = sum_k x[b, i, k] * y[b, j, k]`` (``y`` transposed, as TVM's default);
    a batch dimension of 1 broadcasts. Named ``T_batch_matmul_NT``, tag ``"batch_matmul"``."""
    if len(x.shape) != 3 or len(y.shape) != 3:
        raise ExprError("batch_matmul: x and y must be 3-D")
    out_dtype = out_dtype or x.dtype
    bx, m, kx = x.shape
    by, n, _ = y.shape
    one_x = getattr(bx, "value", None) == 1
    one_y = getattr(by, "value", None) == 1
    batch = by if one_x else bx
    k = te.reduce_axis((0, kx), name="k")
    return te.compute(
        (batch, m, n),
        lambda b, i, j: te.sum(x[0 if one_x else b, i, k].astype(out_dtype)
                               * y[0 if one_y else b, j, k].astype(out_dtype), axis=k),
        name="T_batch_matmul_NT", tag="batch_matmul")


def batch_flatten(data: te.Tensor) -> te.Tensor:
    """Flatten all but the first dimension (constant shape)."""
    from templtune.topi.utils import get_const_tuple

    shape = get_const_tuple(data.shape)
    if not all(isinstance(s, int) for s in shape[1:]):
        raise ExprError("batch_flatten needs constant inner dimensions")
    inner = 1
    for s in shape[1:]:
        inner *= s

    def f(i: Any, j: Any) -> Any:
        idx = []
        rest: Any = j
        for s in reversed(shape[1:]):
            idx.append(rest % s)
            rest = rest // s
        return data[(i, *reversed(idx))]

    return te.compute((data.shape[0], inner), f, name="tensor", tag=tag.INJECTIVE)
