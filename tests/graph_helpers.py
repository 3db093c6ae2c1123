"""Shared by the network-op tests: build a network at opt_level 3 and run it once."""

from __future__ import annotations

import numpy as np

import templtune
from templtune import graph, relay, transform
from templtune.graph.ir import Function


def build_run(func: Function, params: dict[str, np.ndarray], feeds: dict[str, np.ndarray],
              target: str = "llvm") -> tuple[np.ndarray, graph.GraphExecutorFactoryModule]:
    """``(output, lib)``: ``func`` built for ``target`` with ``params`` bound, run on
    ``feeds`` through TVM's ``graph_executor`` names."""
    from templtune.contrib import graph_executor

    dev = templtune.cpu(0) if target == "llvm" else templtune.cuda(0)
    with transform.PassContext(opt_level=3):
        lib = relay.build(func, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](dev))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return m.get_output(0).numpy(), lib
