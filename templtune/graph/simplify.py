"""Reshape simplification before fusion (part of Relay's ``SimplifyExpr``, plus one rewrite).

- ``reshape(reshape(x))`` becomes ``reshape(x)``, and a reshape to its input's own shape goes.
- A transpose that moves only unit axes (the order of the others kept) is a reshape, and a
  ``batch_flatten`` of a reshape is one reshape.
- A reshape that only adds or drops unit dimensions sinks below the element-wise op
  that alone reads it: ``op(reshape(a), b)`` becomes ``reshape(op(a, b))`` where ``b``
  broadcasts against ``a`` as it did against the reshape, or, where ``b`` has the reshape's
  full shape, ``reshape(op(a, reshape(b)))``.
- A transpose of the last two axes that only ``nn.batch_matmul`` reads becomes the product's
  ``transpose_a`` / ``transpose_b`` flag, unless the nearest transpose above it moves its
  input's last axis (then the two compose into a copy that keeps rows whole).

Why: an ONNX ``MatMul`` of a ``[1, T, C]`` activation imports as reshape, ``nn.dense``, reshape
back to ``[1, T, N]``; the bias, GELU or scaling after it would read a reshape, which ends
the dense kernel's fused epilogue (templates compute only same-shape element-wise tails). Sunk,
they run in the dense kernel's output stage, and the reshape back meets the next layer's
reshape to 2-D, and both go. A reshape of unit dimensions moves no element, so the
rewrite computes the same values in the same order. TVM's ``SimplifyExpr`` merges reshapes but
does not move them; its x86 dense schedule inlines the reshape into the output stage instead.

And why the flags: ONNX ``MatMul(P, V)`` imports as ``batch_matmul(P, transpose(V))``, and
``V`` arrives as heads split from ``[T, H, D]``: the transposed copy gathers ``[H, D, T]``
element by element, where ``V`` itself copies rows of ``D``. The batch_matmul templates read
either layout. ``Q @ K^T`` is the other case: ``K^T`` is written by a transpose of the last
axis, and the importer's transpose back composes with it into a row copy, so it stays.
"""

from __future__ import annotations

import dataclasses
import math

from .ir import Call, Expr, Function
from .ir import readers as call_readers
from .op import make_call
from .ops.batch_matmul import batch_matmul
from .ops.batch_matmul import flags as batch_matmul_flags
from .ops.elemwise import BINARY, UNARY
from .transform import PassContext

__all__ = ["ELEMENTWISE", "simplify_reshapes", "simplify_for_fusion"]

#: ops computing each output element from the same-index (numpy-broadcast) input elements
ELEMENTWISE = frozenset(UNARY) | frozenset(BINARY) | {"add", "nn.relu", "clip", "nn.bias_add"}


def _core(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _unit_reshape(e: Expr) -> Call | None:
    """``e`` if it is a reshape that only adds or drops unit dimensions."""
    if (isinstance(e, Call) and e.op == "reshape"
            and _core(e.shape) == _core(e.args[0].shape) and e.shape != e.args[0].shape):
        return e
    return None


def _axis_map(r: tuple[int, ...], a: tuple[int, ...]) -> dict[int, int]:
    """Each non-unit axis of ``r`` to the axis of ``a`` holding the same dimension."""
    ra = [i for i, d in enumerate(r) if d != 1]
    aa = [i for i, d in enumerate(a) if d != 1]
    return dict(zip(ra, aa))


def _aligned(o: tuple[int, ...], r: tuple[int, ...], a: tuple[int, ...]) -> bool:
    """Whether ``o`` numpy-broadcasts against ``a`` onto the same dimensions as against ``r``
    (``a`` being ``r`` with unit dimensions added or dropped; ``o`` broadcasts onto ``r``)."""
    if len(o) > len(a):
        return False
    m = _axis_map(r, a)
    for j, d in enumerate(o):
        if d != 1 and m.get(len(r) - len(o) + j) != len(a) - len(o) + j:
            return False
    return True


def _merge(c: Call, arg: Expr) -> Expr | None:
    """``c`` (a reshape whose input is now ``arg``) without a reshape under it or as a no-op."""
    src = arg.args[0] if isinstance(arg, Call) and arg.op == "reshape" else arg
    if src.shape == c.shape:
        return src
    if src is not arg:
        return make_call("reshape", [src], newshape=c.shape)
    return None


#: (id of a value, shape) -> the reshape of that value to that shape, one per pair
_Memo = dict[tuple[int, tuple[int, ...]], Call]


def _reshape(src: Expr, shape: tuple[int, ...], memo: _Memo) -> Expr:
    if src.shape == shape:
        return src
    key = (id(src), shape)
    if key not in memo:
        memo[key] = make_call("reshape", [src], newshape=shape)
    return memo[key]


def _operand(o: Expr, r: Call, memo: _Memo) -> Expr | None:
    """``o`` (or the input of its unit reshape) as an operand of the op moved below ``r`` (its
    input ``a`` in place of ``r``), or None where no such operand computes the same. An
    operand of ``r``'s full shape is reshaped like ``a``: a unit reshape moves no element (a
    view on CPUs), where the op left above ``r`` would be a pass of its own."""
    unit = _unit_reshape(o)
    for cand in (o, None if unit is None else unit.args[0]):
        if cand is not None and _aligned(cand.shape, r.shape, r.args[0].shape):
            return cand
    return _full_operand(o if unit is None else unit.args[0], r, memo)


def _full_operand(o: Expr, r: Call, memo: _Memo) -> Expr | None:
    """``o`` of ``r``'s element count reshaped like ``r``'s input, or None."""
    if math.prod(o.shape) != math.prod(r.shape) or len(o.shape) > len(r.shape):
        return None
    return _reshape(o, r.args[0].shape, memo)


def _as_reshape(c: Call, arg: Expr) -> Expr | None:
    """A transpose that keeps the order of its input's non-unit axes, as a reshape of
    ``arg`` (merged with a reshape under it): it moves only unit axes, so no element moves."""
    core = [k for k in c.attr("axes") if arg.shape[k] != 1]
    if core != sorted(core):
        return None
    return _merge(c, arg) or make_call("reshape", [arg], newshape=c.shape)


def _moves_last(e: Expr) -> bool:
    """Whether the nearest transpose above ``e`` (through element-wise ops on their full-shape
    operand, slices and reshapes that keep the last dimension) moves its input's last axis."""
    while isinstance(e, Call):
        if e.op == "transpose":
            axes = e.attr("axes")
            return axes[-1] != len(axes) - 1
        if e.op == "reshape" and e.shape[-1:] == e.args[0].shape[-1:]:
            e = e.args[0]
        elif e.op == "strided_slice":
            e = e.args[0]
        elif e.op in ELEMENTWISE:
            full = [a for a in e.args if a.shape == e.shape]
            if not full:
                return False
            e = full[0]
        else:
            return False
    return False


def _fold_transposes(c: Call, args: tuple[Expr, ...], only_reader: set[int]) -> Call | None:
    """``c`` (an ``nn.batch_matmul``) reading the inputs of the transposes it alone reads,
    with its flags flipped, or None."""
    new, flip = list(args), list(batch_matmul_flags(dict(c.attrs)))
    for k, t in enumerate(args):
        if (isinstance(t, Call) and t.op == "transpose" and tuple(t.attr("axes")) == (0, 2, 1)
                and id(c.args[k]) in only_reader and not _moves_last(t.args[0])):
            new[k], flip[k] = t.args[0], not flip[k]
    if all(n is o for n, o in zip(new, args)):
        return None
    return batch_matmul(new[0], new[1], transpose_a=flip[0], transpose_b=flip[1])


def _sink(c: Call, args: tuple[Expr, ...], sinkable: set[int], memo: _Memo) -> Call | None:
    """``reshape(c'(a, ...))`` for ``c(reshape(a), ...)`` when that is the same computation."""
    for k, arg in enumerate(args):
        r = _unit_reshape(arg)
        if r is None or id(r) not in sinkable or c.shape != r.shape:
            continue
        a = r.args[0]
        if c.op == "nn.bias_add":
            axis = _axis_map(r.shape, a.shape).get(c.attr("axis") % len(r.shape))
            if k != 0 or axis is None:
                continue
            inner = make_call(c.op, [a, args[1]], axis=axis)
        else:
            new_args = [a if j == k else _operand(o, r, memo) for j, o in enumerate(args)]
            if any(o is None for o in new_args):
                continue
            inner = make_call(c.op, new_args, **dict(c.attrs))  # type: ignore[arg-type]
        return make_call("reshape", [inner], newshape=c.shape)
    return None


def simplify_reshapes(func: Function) -> Function:
    """``func`` with reshapes merged and unit reshapes sunk below element-wise ops (the same
    object when nothing changes).

    Parameters
    ----------
    func : Function

    Returns
    -------
    Function
    """
    calls = func.calls()
    if not any(c.op in ("reshape", "transpose", "nn.batch_flatten") for c in calls):
        return func
    # NOTE: a reshape sinks when element-wise ops are all that read it (they all sink, so it
    # goes); with another reader it would stay, and its input would gain a reader
    readers = call_readers(calls)
    readers[id(func.body)] = [func.body]  # the output: read by the network's caller
    sinkable = {id(c) for c in calls if id(c) != id(func.body)
                and all(u.op in ELEMENTWISE for u in readers.get(id(c), ()))}
    only_reader = {i for i, r in readers.items() if len(r) == 1 and r[0].op == "nn.batch_matmul"
                   and i != id(func.body)}
    swap: dict[int, Expr] = {}
    memo: _Memo = {}
    for c in calls:
        args = tuple(swap.get(id(a), a) for a in c.args)
        new: Expr | None = None
        if c.op == "reshape":
            new = _merge(c, args[0])
        elif c.op == "transpose":
            new = _as_reshape(c, args[0])
        elif c.op == "nn.batch_flatten":  # a reshape: merged with one under it
            new = _merge(c, args[0])
        elif c.op in ELEMENTWISE:
            new = _sink(c, args, sinkable, memo)
        elif c.op == "nn.batch_matmul":
            new = _fold_transposes(c, args, only_reader)
        if new is None and any(n is not o for n, o in zip(args, c.args)):
            new = dataclasses.replace(c, args=args)
        if new is not None:
            swap[id(c)] = new
            if id(c) in sinkable:  # a replacement has its original's readers
                sinkable.add(id(new))
        out = new if new is not None else c
        if isinstance(out, Call) and out.op == "reshape":  # later rewrites reuse it
            memo.setdefault((id(out.args[0]), out.shape), out)
    body = swap.get(id(func.body), func.body)
    if not isinstance(body, Call):  # the network's output is a no-op reshape of an input
        return func
    return func if body is func.body else Function(func.params, body, func.name)


def simplify_for_fusion(func: Function, pc: PassContext) -> Function:
    """``func`` as the fusion pass partitions it: reshapes simplified (pass ``SimplifyExpr``)
    where ``pc`` fuses operators and does not disable that pass."""
    if not pc.fuse or "SimplifyExpr" in pc.disabled_pass:
        return func
    return pc.run_pass("SimplifyExpr", 0, func, lambda: simplify_reshapes(func))
