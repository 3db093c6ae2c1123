"""AutoTVM: template-based tuning (TVM-compatible names).

::

    from templtune import autotvm

    @autotvm.template("tutorial/matmul")
    def matmul(N, L, M, dtype):
        cfg = autotvm.get_config()
        ...

    task = autotvm.task.create("tutorial/matmul", (512, 512, 512, "float32"), "llvm")
    print(task.config_space)

Names are imported lazily (worker processes import little).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    # templates and tasks
    "template": "templtune.autotvm.task.task", "get_config": "templtune.autotvm.task.task",
    "Task": "templtune.autotvm.task.task",
    "register_topi_compute": "templtune.autotvm.task.topi_integration",
    "register_topi_schedule": "templtune.autotvm.task.topi_integration",
    "extract_tasks": "templtune.autotvm.task.topi_integration",
    # spaces
    "ConfigSpace": "templtune.autotvm.space", "ConfigEntity": "templtune.autotvm.space",
    "FallbackConfigEntity": "templtune.autotvm.task.fallback",
    # dispatch
    "DispatchContext": "templtune.autotvm.dispatcher",
    "ApplyConfig": "templtune.autotvm.dispatcher",
    "ApplyHistoryBest": "templtune.autotvm.history",
    "apply_history_best": "templtune.autotvm.history",
    "FallbackContext": "templtune.autotvm.dispatcher",
    "ApplyFixedConfig": "templtune.autotvm.dispatcher",
    "ApplyGraphBest": "templtune.autotvm.dispatcher",
    "apply_graph_best": "templtune.autotvm.dispatcher",
    "ConfigNotFoundError": "templtune.autotvm.dispatcher",
    "clear_fallback_cache": "templtune.autotvm.dispatcher",
    # environment
    "GLOBAL_SCOPE": "templtune.autotvm.env",
    # measurement (helper E)
    "measure_option": "templtune.autotvm.measure", "LocalBuilder": "templtune.autotvm.measure",
    "LocalRunner": "templtune.autotvm.measure", "RPCRunner": "templtune.autotvm.measure",
    "MeasureInput": "templtune.autotvm.measure", "MeasureResult": "templtune.autotvm.measure",
    "MeasureErrorNo": "templtune.autotvm.measure",
    "create_measure_batch": "templtune.autotvm.measure",
    # FLOPs
    "compute_flop": "templtune.autotvm.flop",
}
_SUBMODULES = {"task", "space", "dispatcher", "record", "env", "flop", "measure", "tuner",
               "callback", "feature", "tophub", "graph_tuner"}

__all__ = sorted([*_NAMES, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
