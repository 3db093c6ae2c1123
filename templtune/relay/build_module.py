"""TVM's ``tvm.relay.build_module``: ``build`` and the factory module it returns."""

from __future__ import annotations

from templtune.graph.build import GraphExecutorFactoryModule, build

__all__ = ["GraphExecutorFactoryModule", "build"]
