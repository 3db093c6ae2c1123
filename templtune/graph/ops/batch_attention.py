"""``nn.batch_attention``: ``out[b] = softmax(c * (q[b] @ op_k(k[b])) + bias[g(b)]) @ op_v(v[b])``,
the softmax over the last axis; ``k`` is ``[B, N, D]`` (``transpose_b``, the default: read
transposed, as ``nn.batch_matmul``'s ``y``) or ``[B, D, N]``, ``v`` is ``[B, N, DV]`` or, with
``transpose_v``, ``[B, DV, N]``. The scale ``c`` (a ``[1]`` operand that multiplies the scores,
or divides them) and the additive ``bias`` are optional. The bias is ``[G, N]`` (one row per
sequence, shared by its heads and query rows: a padding mask) or ``[G, M, N]`` (a row per
query row too: a causal mask); batch ``b`` reads ``bias[b // (B / G)]``.

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

#: how a scale operand applies to the scores
SCALES = ("multiply", "divide")


def flags(a: dict[str, Any]) -> tuple[bool, bool]:
    """``(transpose_b, transpose_v)`` of a call's attributes."""
    return bool(a.get("transpose_b", True)), bool(a.get("transpose_v", False))


def extras(a: dict[str, Any]) -> tuple[str, bool]:
    """``(scale, bias)`` of a call's attributes: how its scale operand applies (``""``: none)
    and whether a bias operand follows it."""
    return str(a.get("scale", "")), bool(a.get("bias", False))


def _check_extras(t: list[TensorType], a: dict[str, Any], b: int, m: int, n: int) -> None:
    scale, bias = extras(a)
    if scale not in ("", *SCALES):
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if len(t) != 3 + bool(scale) + bias:
        raise ValueError(f"expected {3 + bool(scale) + bias} operands (q, k, v"
                         f"{', scale' if scale else ''}{', bias' if bias else ''}), got {len(t)}")
    if scale and t[3].shape != (1,):
        raise ValueError(f"the scale must have shape (1,), got {t[3].shape}")
    if bias:
        g = t[-1].shape
        if (len(g) not in (2, 3) or g[-1] != n or g[1:-1] not in ((), (m,)) or g[0] < 1
                or b % g[0]):
            raise ValueError(f"the bias must be [G, {n}] or [G, {m}, {n}] with G dividing the "
                             f"batch {b}, got {g}")


def _infer(t: list[TensorType], a: dict[str, Any]) -> tuple[int, ...]:
    tb, tv = flags(a)
    if len(t) < 3 or any(len(x.shape) != 3 for x in t[:3]):
        raise ValueError("q, k and v must be 3-D")
    (bq, m, d), (bk, n, dk), (bv, nv, dv) = (x.shape for x in t[:3])
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
    _check_extras(t, a, bq, m, n)
    return (bq, m, dv)


def _compute(x: list[te.Tensor], a: dict[str, Any]) -> te.Tensor:
    tb, tv = flags(a)
    scale, bias = extras(a)
    scores = topi.nn.batch_matmul(x[0], x[1], transpose_b=tb)
    if scale or bias:
        raw = scores
        per = raw.shape[0] // (x[-1].shape[0] if bias else 1)
        rows = bias and len(x[-1].shape) == 3

        def logit(b: Any, i: Any, j: Any) -> Any:
            v = raw[b, i, j]
            if scale:
                v = v * x[3][0] if scale == "multiply" else v / x[3][0]
            if not bias:
                return v
            return v + (x[-1][b // per, i, j] if rows else x[-1][b // per, j])

        scores = te.compute(raw.shape, logit, name="attention_scores")
    return topi.nn.batch_matmul(topi.nn.softmax(scores, axis=-1), x[2], transpose_b=tv)


def _reference(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    tb, tv = flags(a)
    scale, bias = extras(a)
    s = ref.batch_matmul_python(x[0], x[1], False, tb).astype(np.float64)
    if scale:
        s = s * x[3][0] if scale == "multiply" else s / x[3][0]
    if bias:
        g = np.repeat(x[-1], s.shape[0] // x[-1].shape[0], axis=0)
        s = s + (g if g.ndim == 3 else g[:, None, :])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = (e / e.sum(axis=-1, keepdims=True)).astype(x[0].dtype)
    return ref.batch_matmul_python(p, x[2], False, tv)


def batch_attention(q: Expr, k: Expr, v: Expr, transpose_b: bool = True,
                    transpose_v: bool = False, scale: Expr | None = None,
                    bias: Expr | None = None, scale_divides: bool = False) -> Call:
    """Dot-product attention per batch: ``softmax(c * (q @ k^T) + bias) @ v``.

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
    scale : Expr, optional
        ``[1]``: multiplies the scores (default: none).
    bias : Expr, optional
        ``[G, N]`` or ``[G, M, N]``, ``G`` dividing ``B``: ``bias[b // (B / G)]`` is added to
        the (scaled) scores of batch ``b``, broadcast over the rows if 2-D (default: none).
    scale_divides : bool
        The scale divides the scores instead.

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
    args = [q, k, v]
    if scale is not None:
        attrs["scale"] = SCALES[scale_divides]
        args.append(scale)
    if bias is not None:
        attrs["bias"] = True
        args.append(bias)
    return make_call("nn.batch_attention", args, **attrs)


register_op("nn.batch_attention", ANCHOR, _infer, _compute, _reference,
            builder=batch_attention)
