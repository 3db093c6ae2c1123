"""TVM's ``tvm.relay.testing``: the model zoo of :mod:`templtune.graph.testing`, re-exported."""

from __future__ import annotations

from templtune.graph.testing import *  # noqa: F403
from templtune.graph.testing import __all__ as _zoo_all

__all__ = list(_zoo_all)
