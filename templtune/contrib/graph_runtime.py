"""``tvm.contrib.graph_runtime``, TVM's older name of :mod:`templtune.contrib.graph_executor`
(the network tutorials still import it)."""

from __future__ import annotations

from .graph_executor import GraphModule, create

__all__ = ["GraphModule", "create"]
