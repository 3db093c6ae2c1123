"""TVM's ``tvm.tir`` expression names, re-exported from :mod:`templtune.te`.

``indexdiv`` / ``indexmod`` are TVM's index arithmetic (floor division and modulo, the same
operations as ``floordiv`` / ``floormod``); the TE tutorial writes
``packedB[y // bn, k, tvm.tir.indexmod(y, bn)]``.
"""

from __future__ import annotations

from templtune.te.expr import (
    Cast,
    FloatImm,
    IntImm,
    IterVar,
    PrimExpr,
    Range,
    StringImm,
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
    sigmoid,
    sqrt,
    tanh,
    truncdiv,
)
from templtune.te.reduction import max_value, min_value

indexdiv = floordiv
indexmod = floormod

__all__ = [
    "Cast", "FloatImm", "IntImm", "IterVar", "PrimExpr", "Range", "StringImm", "Var", "abs", "all",
    "any", "cast", "ceil", "const", "erf", "exp", "floor", "floordiv", "floormod", "if_then_else",
    "indexdiv", "indexmod", "likely", "log", "max_value", "min_value", "power", "sigmoid", "sqrt",
    "tanh", "truncdiv",
]
