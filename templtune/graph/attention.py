"""Attention fusion (pass ``FuseAttention``): ``batch_matmul -> softmax -> batch_matmul`` as one
``nn.batch_attention`` call, where a template on the target computes it in one kernel.

The chain it matches, as the ONNX importer and ``SimplifyExpr`` leave a transformer's
attention::

    s = nn.batch_matmul(q, k, transpose_b=tb)        # [B, M, N]; transpose_a off
    p = nn.softmax(s', axis=-1)                      # s' = s, or s with unit dims added
    o = nn.batch_matmul(p', v, transpose_b=tv)       # p' = p, or p with them dropped

with ``s``, ``s'``, ``p`` and ``p'`` each read by the next step alone (the scores are not an
output of the network or of another branch). A scale or mask between the product and the
softmax ends the match (ViT's exporters fold the scale into ``q`` or ``k``).

Why: the unfused network writes the ``M x N`` scores, reads and writes them in the softmax
and reads them in the second product: three passes over ``B x M x N`` floats (16 MB per
layer for ViT-B/16 at 384 pixels). The fused kernel keeps a tile of rows in cache.

The pass runs where ``relay.build`` would choose a template for the new call (the op's
strategy accepts it on the target), templates are on, and no auto-scheduler records apply
(they were tuned on the unfused groups); AutoTVM task extraction runs it the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from templtune.autotvm import strategy

from .autotvm_integration import op_call
from .ir import Call, Expr, Function
from .ops.batch_attention import batch_attention
from .ops.batch_matmul import flags as batch_matmul_flags
from .transform import PassContext

__all__ = ["fuse_attention", "fuse_attention_for"]

PASS_NAME = "FuseAttention"


def _through_unit_reshapes(e: Expr, sole: set[int]) -> Expr:
    """``e`` below any reshapes that only add or drop unit dimensions and are read once."""
    while (isinstance(e, Call) and e.op == "reshape" and id(e) in sole
           and [d for d in e.shape if d != 1] == [d for d in e.args[0].shape if d != 1]):
        e = e.args[0]
    return e


def _match(c: Call, sole: set[int]) -> Call | None:
    """``c`` (a batch_matmul) as the ``nn.batch_attention`` of the chain it ends, or None."""
    ta2, tv = batch_matmul_flags(dict(c.attrs))
    p = _through_unit_reshapes(c.args[0], sole)
    if ta2 or not (isinstance(p, Call) and p.op == "nn.softmax" and id(p) in sole):
        return None
    if p.attr("axis") % len(p.shape) != len(p.shape) - 1:
        return None
    s = _through_unit_reshapes(p.args[0], sole)
    if not (isinstance(s, Call) and s.op == "nn.batch_matmul" and id(s) in sole):
        return None
    ta1, tb = batch_matmul_flags(dict(s.attrs))
    q, k, v = s.args[0], s.args[1], c.args[1]
    # NOTE: the softmax runs along the scores' last axis, and P @ V reads the scores' shape
    if (ta1 or not q.shape[0] == k.shape[0] == v.shape[0] or s.shape[-1] != p.shape[-1]
            or c.args[0].shape != s.shape):
        return None
    return batch_attention(q, k, v, transpose_b=tb, transpose_v=tv)


def fuse_attention(func: Function, accept: Any = None) -> Function:
    """``func`` with each ``batch_matmul -> softmax -> batch_matmul`` chain as one
    ``nn.batch_attention`` call (the same object when none matches).

    Parameters
    ----------
    func : Function
    accept : callable, optional
        ``accept(call) -> bool`` for each candidate ``nn.batch_attention`` call; a rejected
        chain stays. Default: every one.

    Returns
    -------
    Function
    """
    calls = func.calls()
    if sum(c.op == "nn.batch_matmul" for c in calls) < 2:
        return func
    readers: dict[int, int] = {id(func.body): 1}
    for c in calls:
        for a in c.args:
            readers[id(a)] = readers.get(id(a), 0) + 1
    sole = {id(c) for c in calls if readers.get(id(c), 0) == 1 and c is not func.body}
    swap: dict[int, Expr] = {}
    for c in calls:
        new = c
        if c.op == "nn.batch_matmul":
            fused = _match(c, sole)
            if fused is not None and (accept is None or accept(fused)):
                new = fused
        args = tuple(swap.get(id(a), a) for a in new.args)
        if any(n is not o for n, o in zip(args, new.args)):
            new = dataclasses.replace(new, args=args)
        if new is not c:
            swap[id(c)] = new
    body = swap.get(id(func.body), func.body)
    if body is func.body or not isinstance(body, Call):
        return func
    return Function(func.params, body, func.name)


def fuse_attention_for(func: Function, pc: PassContext, target: Any) -> Function:
    """``func`` as ``relay.build`` partitions it for ``target`` under ``pc``: attention fused
    where a template strategy on ``target`` takes the fused call (see the module doc)."""
    if (not pc.fuse or not pc.use_templates or PASS_NAME in pc.disabled_pass
            or pc.auto_scheduler_records
            or not strategy.strategies("nn.batch_attention", target)):
        return func

    def accept(call: Call) -> bool:
        return bool(strategy.implementations(op_call(call), target))

    return pc.run_pass(PASS_NAME, 0, func, lambda: fuse_attention(func, accept))
