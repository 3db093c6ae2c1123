"""``auto_scheduler.extract_tasks``: one ``SearchTask`` per distinct fused group of a network.

The network layer (:mod:`templtune.graph`, above the auto-scheduler) registers, with
:func:`register_network`, how its ``Function`` splits into fused groups; this module never
imports it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from templtune.auto_scheduler.compute_dag import ComputeDAG
from templtune.auto_scheduler.search_task import HardwareParams, SearchTask
from templtune.errors import TempltuneError
from templtune.target import Target

__all__ = ["NetworkGroup", "extract_tasks", "register_network"]


@dataclass(frozen=True, slots=True)
class NetworkGroup:
    """One fused group of a network: its function name, its tensors (the output last),
    whether it is simple (no reduction: TVM skips those by default) and, as
    ``(placeholder name, network parameter name)`` pairs, the inputs its task must be measured
    with (the index arrays of a sparse layer: random ones would read out of bounds)."""

    name: str
    tensors: tuple[Any, ...]
    is_simple: bool
    param_inputs: tuple[tuple[str, str], ...] = ()


#: (network, opt_level) -> its fused groups, in order
GroupsFn = Callable[[Any, int], Iterable[NetworkGroup]]

_NETWORKS: dict[type, GroupsFn] = {}


def register_network(cls: type, groups: GroupsFn) -> None:
    """Let :func:`extract_tasks` take networks of type ``cls``, split by ``groups``."""
    _NETWORKS[cls] = groups


def _groups_fn(mod: Any) -> GroupsFn:
    for cls in type(mod).__mro__:
        if cls in _NETWORKS:
            return _NETWORKS[cls]
    raise TempltuneError(f"extract_tasks expects a graph Function, got {type(mod).__name__} "
                         "(is templtune.graph imported?)")


def extract_tasks(mod: Any, params: dict[str, Any] | None = None, target: Any = "llvm",
                  target_host: Any = None, hardware_params: HardwareParams | None = None,
                  include_simple_tasks: bool = False, dump_workload_to_dag_log: Any = None,
                  opt_level: int = 3) -> tuple[list[SearchTask], list[int]]:
    """The tuning tasks of a network and how often each occurs (``auto_scheduler.extract_tasks``).

    Parameters
    ----------
    mod : Function
        The network (``mod["main"]``).
    params : dict, optional
        Bound parameters: task shapes do not depend on them, but a group's
        ``param_inputs`` (a sparse layer's index arrays) become its task's ``task_inputs``.
    target : str or Target
    include_simple_tasks : bool
        Also return groups without a reduction (e.g. a lone flatten); TVM's default skips them.
    opt_level : int
        Below 1, no operator fusion.

    Returns
    -------
    (tasks, weights)
        Tasks in first-seen order; ``weights[i]`` counts the groups that share task ``i``'s
        workload key. ``desc`` is the comma-joined fused-function names, as in TVM.
    """
    groups = _groups_fn(mod)
    if opt_level < 0:
        raise TempltuneError(f"opt_level must be >= 0, got {opt_level}")
    tgt = Target(target) if isinstance(target, str) else target
    order: list[str] = []
    found: dict[str, tuple[ComputeDAG, list[str]]] = {}
    weights: dict[str, int] = {}
    inputs: dict[str, dict[str, Any]] = {}
    for group in groups(mod, opt_level):
        if group.is_simple and not include_simple_tasks:
            continue
        dag = ComputeDAG(list(group.tensors))
        key = dag.workload_key()
        if key not in found:
            found[key] = (dag, [])
            order.append(key)
            weights[key] = 0
        for ph_name, param in group.param_inputs:
            if params is None or param not in params:
                raise TempltuneError(f"task {group.name} must be measured with parameter "
                                     f"{param!r}; pass the network's params to extract_tasks")
            value = params[param]
            inputs.setdefault(key, {}).setdefault(
                ph_name, value.numpy() if hasattr(value, "numpy") else value)
        if group.name not in found[key][1]:
            found[key][1].append(group.name)
        weights[key] += 1
    tasks = [SearchTask(compute_dag=found[k][0], workload_key=k, target=tgt,
                        target_host=target_host, hardware_params=hardware_params,
                        desc=",".join(found[k][1]), task_inputs=inputs.get(k),
                        task_inputs_overwrite=True)
             for k in order]
    if dump_workload_to_dag_log is not None:
        with open(dump_workload_to_dag_log, "w") as f:
            json.dump({k: str(found[k][0]) for k in order}, f, indent=1)
    return tasks, [weights[k] for k in order]
