"""TVM's ``tvm.relay.op``: ``get(name)`` returns the registered operator (``.name``, ``.kind``)
and raises naming the known operators when there is none."""

from __future__ import annotations

from templtune.graph.op import OPS, OpDef
from templtune.graph.op import get_op as get

__all__ = ["OPS", "OpDef", "get"]
