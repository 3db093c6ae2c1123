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


def batch_matmul(tensor_a: te.Tensor, tensor_b: te.Tensor,
                 oshape: tuple[int, ...] | None = None, out_dtype: str | None = None,
                 transpose_a: bool = False, transpose_b: bool = True) -> te.Tensor:
    """Batched matrix product, TVM's ``topi.nn.batch_matmul``.

    Parameters
    ----------
    tensor_a : Tensor
        ``[B, M, K]``, or ``[B, K, M]`` with ``transpose_a``.
    tensor_b : Tensor
        ``[B, N, K]`` (the default, ``transpose_b=True``), or ``[B, K, N]``.
    oshape : tuple of int, optional
        The output shape the caller expects; checked against ``[B, M, N]``.
    out_dtype : str, optional
        Accumulation/output dtype (default: ``tensor_a.dtype``).
    transpose_a, transpose_b : bool
        Whether the last two axes of ``tensor_a`` / ``tensor_b`` are read transposed.

    Returns
    -------
    Tensor
        ``[B, M, N]``, named ``T_batch_matmul_<a><b>`` (``N``: as is, ``T``: transposed, so
        ``T_batch_matmul_NT`` by default), tag ``"batch_matmul"``. A batch of 1 on either
        side broadcasts.

    Raises
    ------
    ExprError
        If an operand is not 3-D, the inner dimensions differ, or ``oshape`` disagrees.
    """
    if len(tensor_a.shape) != 3 or len(tensor_b.shape) != 3:
        raise ExprError("batch_matmul: tensor_a and tensor_b must be 3-D")
    out_dtype = out_dtype or tensor_a.dtype
    ta, tb = bool(transpose_a), bool(transpose_b)
    bx, m, kx = (tensor_a.shape[0], tensor_a.shape[2], tensor_a.shape[1]) if ta \
        else tensor_a.shape
    by, n, ky = tensor_b.shape if tb else (tensor_b.shape[0], tensor_b.shape[2],
                                           tensor_b.shape[1])
    if getattr(kx, "value", kx) != getattr(ky, "value", ky):
        raise ExprError(f"batch_matmul: inner dimensions differ ({kx} vs {ky})")
    one_x = getattr(bx, "value", None) == 1
    one_y = getattr(by, "value", None) == 1
    batch = by if one_x else bx
    if oshape is not None and tuple(oshape) != tuple(
            getattr(d, "value", d) for d in (batch, m, n)):
        raise ExprError(f"batch_matmul: oshape {tuple(oshape)} is not the product's shape")
    k = te.reduce_axis((0, kx), name="k")

    def a_at(b: Any, i: Any) -> Any:
        b = 0 if one_x else b
        return tensor_a[b, k, i] if ta else tensor_a[b, i, k]

    def b_at(b: Any, j: Any) -> Any:
        b = 0 if one_y else b
        return tensor_b[b, j, k] if tb else tensor_b[b, k, j]

    return te.compute(
        (batch, m, n),
        lambda b, i, j: te.sum(a_at(b, i).astype(out_dtype) * b_at(b, j).astype(out_dtype),
                               axis=k),
        name=f"T_batch_matmul_{'T' if ta else 'N'}{'T' if tb else 'N'}", tag="batch_matmul")


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
