"""Floating-point operation count of a tensor computation (AutoTVM's counter, SPEC §2.5).

Each compute op costs (product of its axis extents) x (cost of its body), where every binary
arithmetic, comparison or logic node costs 1 regardless of dtype, ``Not`` costs 1, a select costs
its condition plus the dearer branch, a reduction costs (product of reduce extents) x (combiner +
source), and reads, constants, variables, casts and call nodes themselves are free.

Deviation from TVM: an op reachable along several paths (a producer shared by two consumers) is
counted once, not once per path (SPEC §9.10). Index and padding arithmetic inside a compute body
is counted as AutoTVM does (the seed conv2d with padding counts 231,501,312).
"""

from __future__ import annotations

from typing import Any

from templtune.errors import TempltuneError
from templtune.te.expr import (
    BinOp,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Reduce,
    Select,
    StringImm,
    TensorLoad,
    Var,
    const_int,
)
from templtune.te.tensor import ComputeOp, PlaceholderOp

__all__ = ["FlopCalculationError", "compute_flop"]


class FlopCalculationError(TempltuneError, RuntimeError):
    """The FLOP counter cannot handle the computation; set it with ``cfg.add_flop``."""


def _expr_flop(e: PrimExpr) -> int:
    if isinstance(e, Reduce):
        if len(e.combiner.result) != 1 or len(e.source) != 1:
            raise FlopCalculationError("cannot count FLOPs of a multi-value reduction")
        n = _prod_extents(e.axis, "reduce axis")
        return n * (_expr_flop(e.combiner.result[0]) + _expr_flop(e.source[0]))
    if isinstance(e, (IntImm, FloatImm, StringImm, Var, TensorLoad)):
        return 0
    if isinstance(e, Cast):
        return _expr_flop(e.value)
    if isinstance(e, BinOp):
        return 1 + _expr_flop(e.a) + _expr_flop(e.b)
    if isinstance(e, Not):
        return 1 + _expr_flop(e.a)
    if isinstance(e, Select):
        return _expr_flop(e.cond) + max(_expr_flop(e.true_value), _expr_flop(e.false_value))
    if isinstance(e, Call):
        return sum(_expr_flop(a) for a in e.args)
    raise FlopCalculationError(f"cannot count FLOPs of {type(e).__name__} nodes")


def _prod_extents(ivs: Any, what: str) -> int:
    total = 1
    for iv in ivs:
        ext = None if iv.dom is None else const_int(iv.dom.extent)
        if ext is None:
            raise FlopCalculationError(f"{what} {iv.var.name} has a non-constant extent")
        total *= ext
    return total


def _op_flop(op: Any) -> int:
    if isinstance(op, PlaceholderOp):
        return 0
    if isinstance(op, ComputeOp):
        if len(op.body) > 1:
            raise FlopCalculationError(f"cannot count FLOPs of multi-output compute {op.name}")
        return _prod_extents(op.axis, "axis") * _expr_flop(op.body[0])
    raise FlopCalculationError(f"cannot count FLOPs of {type(op).__name__} {op.name}: only "
                               "compute and placeholder ops are supported")


def _outputs(sch_or_outs: Any) -> list[Any]:
    outs = getattr(sch_or_outs, "outputs", sch_or_outs)
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    return [getattr(o, "op", o) for o in outs]


def compute_flop(sch: Any) -> float:
    """FLOPs of everything a schedule's outputs compute.

    Parameters
    ----------
    sch : Schedule, Tensor, Operation or list of them
        Anything with ``.outputs``, or output tensors/ops.

    Raises
    ------
    RuntimeError (FlopCalculationError)
        For unsupported ops or nodes, or a zero count ("pure data movement"); the message
        suggests ``cfg.add_flop``.
    """
    seen: set[int] = set()
    stack = _outputs(sch)
    total = 0
    try:
        while stack:
            op = stack.pop()
            if id(op) in seen:
                continue
            seen.add(id(op))
            total += _op_flop(op)
            stack.extend(t.op for t in op.input_tensors)
    except FlopCalculationError as err:
        raise FlopCalculationError(f"{err}. Use cfg.add_flop(n) in the template to set the "
                                   "FLOP count by hand.") from None
    if total == 0:
        raise FlopCalculationError("the computation has no arithmetic (pure data movement?); use "
                                   "cfg.add_flop(n) in the template to set the FLOP count")
    return float(total)
