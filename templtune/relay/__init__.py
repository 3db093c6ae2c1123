"""TVM's ``tvm.relay`` name for :mod:`templtune.graph`, importable as a package.

``from templtune import relay`` and ``import templtune.relay.testing`` (what TVM's network
tutorials write) both work; every name here is :mod:`templtune.graph`'s own object.
"""

from __future__ import annotations

from templtune.graph import *  # noqa: F403
from templtune.graph import __all__ as _graph_all

# TVM's module names; relay.testing is the package below, not graph.testing
from . import (  # type: ignore[no-redef]  # noqa: F401,F811
    build_module,
    data_dep_optimization,
    op,
    testing,
    transform,
)

__all__ = list(_graph_all)
