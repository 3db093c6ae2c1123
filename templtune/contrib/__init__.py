"""TVM's ``tvm.contrib`` names that tutorials import: ``graph_executor`` (and its old name
``graph_runtime``), ``cc`` (link object files into a shared library) and ``utils`` (``tempdir``)."""

from __future__ import annotations

from . import cc, graph_executor, graph_runtime, utils

__all__ = ["cc", "graph_executor", "graph_runtime", "utils"]
