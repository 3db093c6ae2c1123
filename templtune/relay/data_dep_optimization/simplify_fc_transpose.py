"""``ddo.simplify_fc_transpose.convert(func, params)``."""

from __future__ import annotations

from templtune.graph.sparse import simplify_fc_transpose_convert as convert

__all__ = ["convert"]
