"""AutoTVM tasks: templates, task creation, config spaces and dispatch (TVM's ``autotvm.task``).

Names are resolved lazily so that ``templtune.autotvm.task.knobs`` can be imported by
``templtune.autotvm.space`` without a cycle.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "Task": "task", "TaskTemplate": "task", "TASK_TABLE": "task", "UnknownTemplateError": "task",
    "create": "task", "template": "task", "get_config": "task", "serialize_args": "task",
    "deserialize_args": "task", "args_to_workload": "task",
    "FallbackConfigEntity": "fallback",
    "load_reference_log": "reference",
    "register_topi_compute": "topi_integration", "register_topi_schedule": "topi_integration",
    "get_workload": "topi_integration", "extract_tasks": "topi_integration",
    "extract_from_program": "relay_integration",
}
_OUTER = {
    "ConfigSpace": "templtune.autotvm.space", "ConfigEntity": "templtune.autotvm.space",
    "DispatchContext": "templtune.autotvm.dispatcher",
    "ApplyConfig": "templtune.autotvm.dispatcher",
    "ApplyHistoryBest": "templtune.autotvm.history",
    "FallbackContext": "templtune.autotvm.dispatcher",
    "clear_fallback_cache": "templtune.autotvm.dispatcher",
    "compute_flop": "templtune.autotvm.flop",
}

_SUBMODULES = {"space", "dispatcher", "task", "knobs", "fallback", "reference", "target_compat",
               "topi_integration", "relay_integration"}

__all__ = sorted([*_NAMES, *_OUTER])


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    if name in _OUTER:
        return getattr(importlib.import_module(_OUTER[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
