"""Text form of scalar expressions, close to TVM's TIR printer."""

from __future__ import annotations

from typing import Any

from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    Reduce,
    Select,
    StringImm,
    TensorLoad,
    Var,
)

_FUNC_OPS = {BinOpKind.MIN: "min", BinOpKind.MAX: "max", BinOpKind.FLOORDIV: "floordiv",
             BinOpKind.FLOORMOD: "floormod"}


def expr_str(e: Any) -> str:
    """Render an expression; loop-IR nodes (Load, Ramp, Broadcast, Shuffle) are rendered by name."""
    if isinstance(e, IntImm):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        return str(e.value) if e.dtype == "int32" else f"{e.dtype}({e.value})"
    if isinstance(e, FloatImm):
        return f"{e.value!r}f" if e.dtype == "float32" else f"{e.dtype}({e.value!r})"
    if isinstance(e, StringImm):
        return repr(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, BinOp):
        if e.op in _FUNC_OPS:
            return f"{_FUNC_OPS[e.op]}({expr_str(e.a)}, {expr_str(e.b)})"
        return f"({expr_str(e.a)} {e.op.value} {expr_str(e.b)})"
    if isinstance(e, Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, Select):
        name = "tir.if_then_else" if e.guarded else "select"
        return f"{name}({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, TensorLoad):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(repr(a) for a in e.axis)
        src = ", ".join(expr_str(s) for s in e.source)
        return f"reduce({e.combiner.name}, source=[{src}], axis=[{axes}], where={expr_str(e.condition)})"
    name = type(e).__name__
    if name == "Load":
        if e.predicate is not None:
            return f"{e.buffer.name}[{expr_str(e.index)}, mask={expr_str(e.predicate)}]"
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    if name == "Ramp":
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if name == "Broadcast":
        return f"broadcast({expr_str(e.value)}, {e.lanes})"
    if name == "Shuffle":
        return f"shuffle({expr_str(e.vector)}, {list(e.indices)})"
    return f"<{name}>"
