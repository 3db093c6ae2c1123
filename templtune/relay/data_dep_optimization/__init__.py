"""TVM's ``relay.data_dep_optimization``: rewrites that depend on the weights' values
(:mod:`templtune.graph.sparse`)."""

from __future__ import annotations

from . import bsr_dense, simplify_fc_transpose

__all__ = ["bsr_dense", "simplify_fc_transpose"]
