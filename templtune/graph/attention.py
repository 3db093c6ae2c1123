"""Attention fusion (pass ``FuseAttention``): ``batch_matmul -> softmax -> batch_matmul`` as one
``nn.batch_attention`` call, where a template on the target computes it in one kernel.

The chain it matches, as the ONNX importer and ``SimplifyExpr`` leave a transformer's
attention::

    s = nn.batch_matmul(q, k, transpose_b=tb)        # [B, M, N]; transpose_a off
    t = divide(s', c) or multiply(s', c)             # optional: c of one element
    u = add(t', mask) or nn.bias_add(t', mask, -1)   # optional: an additive mask
    p = nn.softmax(u', axis=-1)
    o = nn.batch_matmul(p', v, transpose_b=tv)

where ``x'`` is ``x`` or ``x`` reshaped with only unit dimensions added or dropped, or its
batch dimensions regrouped (``[B, M, N]`` as ``[b, h, M, N]``), and each step is read by the
next alone (the scores are not an output of the network or of another branch). The mask's
dimensions over the batch must be those of the scores up to some axis and 1 after it (one
mask per sequence, shared by its heads); over the query rows it is constant (a padding mask)
or varies (a causal mask, which ``where(causal, scores, finfo.min)`` also becomes: see
:mod:`.fold`). A mask per head or a scale after the mask ends the match.

Why: the unfused network writes the ``M x N`` scores, reads and writes them in the softmax
and reads them in the second product: three passes over ``B x M x N`` floats (16 MB per
layer for ViT-B/16 at 384 pixels). The fused kernel keeps a tile of rows in cache.

The pass runs where ``relay.build`` would choose a template for the new call (the op's
strategy accepts it on the target), templates are on, and no auto-scheduler records apply
(they were tuned on the unfused groups); AutoTVM task extraction runs it the same way.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from templtune.autotvm import strategy

from .autotvm_integration import op_call
from .ir import Call, Expr, Function
from .op import make_call
from .ops.batch_attention import batch_attention
from .ops.batch_matmul import flags as batch_matmul_flags
from .transform import PassContext

__all__ = ["fuse_attention", "fuse_attention_for"]

PASS_NAME = "FuseAttention"


def _keeps_rows(r: Call) -> bool:
    """Whether reshape ``r`` only adds or drops unit dimensions or regroups batch ones."""
    a, b = r.shape, r.args[0].shape
    return ([d for d in a if d != 1] == [d for d in b if d != 1]
            or (len(a) >= 3 and len(b) >= 3 and a[-2:] == b[-2:]))


def _through_reshapes(e: Expr, sole: set[int]) -> Expr:
    """``e`` below any reshapes that keep its rows (:func:`_keeps_rows`) and are read once."""
    while (isinstance(e, Call) and e.op == "reshape" and id(e) in sole and _keeps_rows(e)):
        e = e.args[0]
    return e


def _step(e: Expr, sole: set[int], ops: tuple[str, ...]) -> tuple[Call, Expr, Expr] | None:
    """``(call, data, other)`` if ``e`` is a call of ``ops``, read once, of a same-shaped data
    operand (either side of a commutative op) and an operand broadcast to it."""
    if not (isinstance(e, Call) and e.op in ops and id(e) in sole and len(e.args) == 2):
        return None
    a, b = e.args
    for data, other in ((a, b),) if e.op in ("divide", "nn.bias_add") else ((a, b), (b, a)):
        if data.shape == e.shape and len(other.shape) <= len(e.shape):
            return e, data, other
    return None


def _bias_shape(mask: tuple[int, ...], x: tuple[int, ...]) -> tuple[int, ...] | None:
    """The ``[G, N]`` or ``[G, M, N]`` bias that ``mask`` (broadcast to scores ``x``) is, or
    None."""
    m = (1,) * (len(x) - len(mask)) + mask
    if m[-1] != x[-1] or m[-2] not in (1, x[-2]):
        return None
    lead = list(m[:-2])
    while lead and lead[-1] == 1:
        lead.pop()
    if lead != list(x[:len(lead)]):
        return None
    g = int(math.prod(lead))
    return (g, *m[-2:]) if m[-2] != 1 else (g, m[-1])


class _Operands:
    """The scale and bias operands of matched chains, as the op takes them; one reshape per
    source and shape (the layers of a network share their mask). ``swap``: the rewrite's
    replacements so far, which a reshape's source takes (as the fused call's other args do)."""

    def __init__(self, swap: dict[int, Expr]) -> None:
        self.swap = swap
        self.memo: dict[tuple[int, tuple[int, ...]], Expr] = {}

    def shaped(self, e: Expr, shape: tuple[int, ...]) -> Expr:
        if e.shape == shape:
            return e
        key = (id(e), shape)
        if key not in self.memo:
            self.memo[key] = make_call("reshape", [self.swap.get(id(e), e)], newshape=shape)
        return self.memo[key]

    def logits(self, e: Expr, sole: set[int]) -> tuple[Expr, dict[str, Any]] | None:
        """Below the softmax's input ``e``: the scores and the scale and bias applied to them
        (as :func:`batch_attention`'s keyword arguments), or None where another op sits."""
        kw: dict[str, Any] = {}
        e = _through_reshapes(e, sole)
        bias = _step(e, sole, ("add", "nn.bias_add"))
        if bias is not None:
            call, data, mask = bias
            # NOTE: a bias_add on the last axis broadcasts its [N] mask as an add would
            if call.op == "nn.bias_add" and (call.attr("axis") % len(call.shape)
                                             != len(call.shape) - 1):
                return None
            shape = _bias_shape(mask.shape, call.shape)
            if shape is None or mask.dtype != call.dtype:
                return None
            # NOTE: a mask over the rows is [G, M, N]; _match checks that M is the rows' axis
            kw["bias"] = self.shaped(mask, shape)
            e = _through_reshapes(data, sole)
        scale = _step(e, sole, ("multiply", "divide"))
        if scale is not None:
            call, data, c = scale
            if math.prod(c.shape) != 1 or c.dtype != call.dtype:
                return None
            kw["scale"] = self.shaped(c, (1,))
            kw["scale_divides"] = call.op == "divide"
            e = _through_reshapes(data, sole)
        return e, kw


def _match(c: Call, sole: set[int], operands: _Operands) -> Call | None:
    """``c`` (a batch_matmul) as the ``nn.batch_attention`` of the chain it ends, or None."""
    ta2, tv = batch_matmul_flags(dict(c.attrs))
    p = _through_reshapes(c.args[0], sole)
    if ta2 or not (isinstance(p, Call) and p.op == "nn.softmax" and id(p) in sole):
        return None
    if p.attr("axis") % len(p.shape) != len(p.shape) - 1:
        return None
    found = operands.logits(p.args[0], sole)
    if found is None:
        return None
    s, kw = found
    if not (isinstance(s, Call) and s.op == "nn.batch_matmul" and id(s) in sole):
        return None
    ta1, tb = batch_matmul_flags(dict(s.attrs))
    q, k, v = s.args[0], s.args[1], c.args[1]
    # NOTE: the softmax runs along the scores' last axis, and P @ V reads the scores' shape
    if (ta1 or not q.shape[0] == k.shape[0] == v.shape[0] or s.shape[-1] != p.shape[-1]
            or c.args[0].shape != s.shape):
        return None
    # NOTE: the mask is constant over runs of B * M / G flat rows; where G divides B a run
    # is whole batches (else a unit reshape moved the rows into the mask's groups)
    if "bias" in kw and (s.shape[0] % kw["bias"].shape[0]
                         or kw["bias"].shape[1:-1] not in ((), s.shape[1:2])):
        return None
    return batch_attention(q, k, v, transpose_b=tb, transpose_v=tv, **kw)


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
    operands = _Operands(swap)
    for c in calls:
        new = c
        if c.op == "nn.batch_matmul":
            fused = _match(c, sole, operands)
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
