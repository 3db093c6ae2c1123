"""``autotvm.task.extract_from_program``: tasks of a network's anchor ops. The network layer
(:mod:`templtune.graph`) sits above AutoTVM, so this entry imports it when called."""

from __future__ import annotations

from typing import Any


def extract_from_program(mod: Any, params: Any, target: Any, target_host: Any = None,
                         ops: Any = None) -> list[Any]:
    """AutoTVM tasks of a :mod:`templtune.graph` network, one per distinct template workload
    that building it would run (see :func:`templtune.graph.autotvm_integration.
    extract_from_program`)."""
    from templtune.graph.autotvm_integration import extract_from_program as _extract

    return _extract(mod, params, target, target_host, ops)
