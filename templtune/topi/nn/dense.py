"""Fully connected layer."""

from __future__ import annotations

from templtune import te
from templtune.errors import ExprError
from templtune.topi import tag

__all__ = ["dense"]


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
