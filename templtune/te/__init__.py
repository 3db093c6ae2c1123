"""Tensor expressions: declare *what* to compute (``placeholder``, ``compute``, reductions).

``create_schedule`` is re-exported lazily from :mod:`templtune.schedule`, a higher layer.

Submodules used by the compiler and the tests:

* :mod:`templtune.te.simplify` -- ``simplify(e, ranges)``, ``can_prove``, ``Simplifier``;
* :mod:`templtune.te.bound` -- ``Interval``, ``eval_interval``, ``const_interval``, ``union``;
* :mod:`templtune.te.evaluate` -- ``evaluate(outputs, inputs)``, the numpy reference evaluator;
* :mod:`templtune.te.const_eval` -- ``eval_const(e, env)``, scalar evaluation at one point.

NOTE: ``==`` between expressions (and IterVars) is identity, as everywhere in templtune; build a
comparison node with :func:`templtune.te.expr.equal` (``te.if_then_else(i == j, ...)`` would test
whether ``i`` and ``j`` are the same object).
"""

from __future__ import annotations

from typing import Any

from templtune.te.expr import (
    CommReducer,
    IterVar,
    PrimExpr,
    Range,
    Reduce,
    Var,
    const,
)
from templtune.te.intrin import (
    abs,
    all,
    any,
    cast,
    ceil,
    erf,
    exp,
    floor,
    floordiv,
    floormod,
    if_then_else,
    likely,
    log,
    power,
    select,
    sigmoid,
    sqrt,
    tanh,
    truncdiv,
)
from templtune.te.operation import compute, placeholder, reduce_axis, thread_axis, var
from templtune.te.reduction import comm_reducer, max, max_value, min, min_value, sum
from templtune.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

__all__ = [
    "placeholder", "compute", "reduce_axis", "thread_axis", "var", "const", "sum", "max", "min",
    "comm_reducer", "max_value", "min_value", "exp", "log", "sqrt", "tanh", "sigmoid", "abs",
    "floordiv", "floormod", "truncdiv", "cast", "if_then_else", "select", "all", "any", "power",
    "floor", "ceil", "erf", "likely", "create_schedule", "Tensor", "PrimExpr", "IterVar", "Var",
    "Range", "Reduce", "CommReducer", "Operation", "ComputeOp", "PlaceholderOp",
]


def __getattr__(name: str) -> Any:
    # NOTE: schedule sits above te in the layering; import it only when asked for.
    if name == "create_schedule":
        from templtune.schedule import create_schedule

        return create_schedule
    raise AttributeError(f"module 'templtune.te' has no attribute {name!r}")
