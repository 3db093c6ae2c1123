"""A numpy interpreter of the network IR: the oracle that built networks are checked against."""

from __future__ import annotations

from typing import Any

import numpy as np

from .ir import Function
from .op import GraphError, get_op


def evaluate(mod: Function, params: dict[str, Any], **inputs: Any) -> np.ndarray:
    """Run ``mod`` in numpy (float64 accumulation inside convolutions, as topi's references)."""
    env: dict[int, np.ndarray] = {}
    for v in mod.params:
        val = params.get(v.name, inputs.get(v.name))
        if val is None:
            raise GraphError(f"no value for input {v.name!r}")
        env[id(v)] = np.asarray(val, dtype=v.dtype)
    for c in mod.calls():
        out = get_op(c.op).reference([env[id(a)] for a in c.args], dict(c.attrs))
        env[id(c)] = np.asarray(out, dtype=c.dtype)
    return env[id(mod.body)]
