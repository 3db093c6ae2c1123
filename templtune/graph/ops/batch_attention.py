"""``nn.batch_attention``: ``out[b] = softmax(q[b] @ op_k(k[b])) @ op_v(v[b])``, the softmax over
the last axis; ``k`` is ``[B, N, D]`` (``transpose_b``, the default: read transposed, as
``nn.batch_matmul``'s ``y``) or ``[B, D, N]``, ``v`` is ``[B, N, DV]`` or, with
``transpose_v``, ``[B, DV, N]``.

templtune's own operator (Relay has none): the attention-fusion pass
(:mod:`templtune.graph.attention`) rewrites ``batch_matmul -> softmax -> batch_matmul`` into
it where a template computes it in one kernel. Elsewhere it computes as those three ops.
Flags at their defaults are not stored in the call's attributes."""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune import te, topi
from templtune.topi import testing as ref

from ..ir import Call, Expr, TensorType
from ..op import ANCHOR, make_call, register_op


def flags(a: dict[str, Any]) -> tuple[bool, bool]:
    """``(transpose_b, transpose_v)`` of a call's attributes."""
    return bool(a.get("transpose_b", True)), bool(a.get("transpose_v", False))


def _infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    tb, tv = flags(a)
    if len(t) != 3 or any(len(x.shape) != 3 for x in t):
        raise ValueError("q, k and v must be 3-D")
    (bq, m, d), (bk, n, dk), (bv, nv, dv) = (x.shape for x in t)
    if not tb:
        n, dk = dk, n
    if tv:
        nv, dv = dv, nv
    if not bq == bk == bv:
        raise ValueError(f"batches {bq}, {bk}, {bv} differ")
    if d != dk:
        raise ValueError(f"q and k differ in depth ({d} vs {dk})")
    if n != nv:
        raise ValueError(f"k and v differ in length ({n} vs {nv})")
    return (bq, m, dv)


def _compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    tb, tv = flags(a)
    scores = topi.nn.batch_matmul(x[0], x[1], transpose_b=tb)
    return topi.nn.batch_matmul(topi.nn.softmax(scores, axis=-1), x[2], transpose_b=tv)


def _reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    tb, tv = flags(a)
    s = ref.batch_matmul_python(x[0], x[1], False, tb).astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = (e / e.sum(axis=-1, keepdims=True)).astype(x[0].dtype)
    return ref.batch_matmul_python(p, x[2], False, tv)


def batch_attention(q: Expr, k: Expr, v: Expr, transpose_b: bool = True,
                    transpose_v: bool = False) -> Call:
    """Dot-product attention per batch, unscaled: ``softmax(q @ k^T) @ v``.

    Parameters
    ----------
    q : Expr
        ``[B, M, D]``.
    k : Expr
        ``[B, N, D]`` (``transpose_b``, the default), else ``[B, D, N]``.
    v : Expr
        ``[B, N, DV]``, or ``[B, DV, N]`` with ``transpose_v``.
    transpose_b, transpose_v : bool
        As ``nn.batch_matmul``'s ``transpose_b`` for the two products.

    Returns
    -------
    Call
        ``[B, M, DV]``.

    Raises
    ------
    GraphError
        If the shapes do not fit the flags.
    """
    attrs: dict[str, Any] = {}
    if not transpose_b:
        attrs["transpose_b"] = False
    if transpose_v:
        attrs["transpose_v"] = True
    return make_call("nn.batch_attention", [q, k, v], **attrs)


register_op("nn.batch_attention", ANCHOR, _infer, _compute, _reference,
            builder=batch_attention)
