"""``ddo.bsr_dense.convert(func, params, blocksize, sparsity_threshold)``."""

from __future__ import annotations

from templtune.graph.sparse import bsr_dense_convert as convert

__all__ = ["convert"]
