"""TVM's ``tvm.contrib.graph_executor``: :class:`templtune.graph.GraphModule` and ``create``."""

from __future__ import annotations

from typing import Any

from templtune.graph.build import GraphExecutorFactoryModule
from templtune.graph.executor import GraphModule
from templtune.graph.op import GraphError

__all__ = ["GraphModule", "create"]


def create(graph_json_str: Any, libmod: Any = None, device: Any = None) -> GraphModule:
    """A :class:`GraphModule` for a built network, as TVM's ``graph_executor.create``.

    Parameters
    ----------
    graph_json_str
        What ``relay.build`` returned: templtune keeps the graph inside the built library, so
        the library stands where TVM passes the graph JSON (``create(lib, dev)``).
    libmod, device
        The device (two-argument form), or the library and the device (TVM's
        ``create(graph, lib, dev)``).

    Raises
    ------
    GraphError
        If neither argument is a library built by ``relay.build``.
    """
    if isinstance(graph_json_str, GraphExecutorFactoryModule):
        return GraphModule(graph_json_str["default"](device if device is not None else libmod))
    if isinstance(libmod, GraphExecutorFactoryModule):
        return GraphModule(libmod["default"](device))
    raise GraphError("graph_executor.create needs the library returned by relay.build, got "
                     f"{type(graph_json_str).__name__} and {type(libmod).__name__}")
