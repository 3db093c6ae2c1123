"""``auto_scheduler.extract_tasks``: the network layer (:mod:`templtune.graph`) sits above the
auto-scheduler, so this entry imports it when called."""

from __future__ import annotations

from typing import Any


def extract_tasks(mod: Any, params: Any = None, target: Any = "llvm", target_host: Any = None,
                  hardware_params: Any = None, include_simple_tasks: bool = False,
                  dump_workload_to_dag_log: Any = None, opt_level: int = 3) -> tuple[list, list]:
    """The tuning tasks of a network and their weights; see
    :func:`templtune.graph.extract_tasks`."""
    from templtune.graph.extract import extract_tasks as _extract

    return _extract(mod, params, target, target_host, hardware_params, include_simple_tasks,
                    dump_workload_to_dag_log, opt_level)
