"""Task extraction: one auto-scheduler ``SearchTask`` per distinct fused group of a network."""

from __future__ import annotations

from typing import Any

from templtune.auto_scheduler.compute_dag import ComputeDAG
from templtune.auto_scheduler.search_task import HardwareParams, SearchTask
from templtune.target import Target

from .fuse import partition
from .ir import Function
from .op import GraphError
from .transform import PassContext


def extract_tasks(mod: Function, params: dict[str, Any] | None = None, target: Any = "llvm",
                  target_host: Any = None, hardware_params: HardwareParams | None = None,
                  include_simple_tasks: bool = False, dump_workload_to_dag_log: Any = None,
                  opt_level: int = 3) -> tuple[list[SearchTask], list[int]]:
    """The tuning tasks of a network and how often each occurs (``auto_scheduler.extract_tasks``).

    Parameters
    ----------
    mod : Function
        The network (``mod["main"]``).
    params : dict, optional
        Bound parameters; accepted for API compatibility (task shapes do not depend on values).
    target : str or Target
    include_simple_tasks : bool
        Also return groups without a reduction (e.g. a lone flatten); TVM's default skips them.

    Returns
    -------
    (tasks, weights)
        Tasks in first-seen order; ``weights[i]`` counts the groups that share task ``i``'s
        workload key. ``desc`` is the comma-joined fused-function names, as in TVM.
    """
    if not isinstance(mod, Function):
        raise GraphError(f"extract_tasks expects a graph Function, got {type(mod).__name__}")
    if opt_level < 0:
        raise GraphError(f"opt_level must be >= 0, got {opt_level}")
    tgt = Target(target) if isinstance(target, str) else target
    order: list[str] = []
    found: dict[str, tuple[ComputeDAG, list[str]]] = {}
    weights: dict[str, int] = {}
    pc = PassContext.current()
    for group in partition(mod, opt_level >= 1 and pc.fuse, pc.max_fuse_depth):
        if group.is_simple and not include_simple_tasks:
            continue
        dag = ComputeDAG(group.to_tensors())
        key = dag.workload_key()
        if key not in found:
            found[key] = (dag, [])
            order.append(key)
            weights[key] = 0
        if group.name not in found[key][1]:
            found[key][1].append(group.name)
        weights[key] += 1
    tasks = [SearchTask(compute_dag=found[k][0], workload_key=k, target=tgt,
                        target_host=target_host, hardware_params=hardware_params,
                        desc=",".join(found[k][1]))
             for k in order]
    if dump_workload_to_dag_log is not None:
        import json

        with open(dump_workload_to_dag_log, "w") as f:
            json.dump({k: str(found[k][0]) for k in order}, f, indent=1)
    return tasks, [weights[k] for k in order]
