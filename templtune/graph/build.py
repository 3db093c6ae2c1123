"""Compile a network: fuse, schedule each group (tuned or default), build one kernel per group.

A group's schedule comes from the enclosing ``auto_scheduler.ApplyHistoryBest`` when it holds a
record for the group's workload key (the key ``extract_tasks`` gave the task); otherwise a
default schedule is used: injective producers inlined, and the leading spatial loops of every
remaining stage fused and run in parallel. Equal groups (same workload key) share one kernel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

import templtune
from templtune import te
from templtune.auto_scheduler.compute_dag import ComputeDAG
from templtune.auto_scheduler.dispatcher import ApplyHistoryBest
from templtune.target import Target
from templtune.te.expr import Reduce
from templtune.te.tensor import ComputeOp

from .fuse import FusedGroup, partition
from .ir import Function, Var
from .op import GraphError
from .transform import PassContext

logger = logging.getLogger("templtune.graph")

_PARALLEL_MIN = 64  # fuse leading loops until this many parallel iterations (or all but one)


@dataclass(frozen=True, slots=True)
class CompiledGroup:
    """One fused group, its kernel, and whether a tuned record scheduled it."""

    group: FusedGroup
    kernel: Any
    workload_key: str
    tuned: bool


def default_schedule(tensors: list[te.Tensor]) -> Any:
    """Inline injective producers; fuse and parallelise the outer loops of what remains."""
    out = tensors[-1]
    s = te.create_schedule(out.op)
    feeds_reduction = {id(t.op) for st in s.stages if isinstance(st.op, ComputeOp)
                       and isinstance(st.op.body[0], Reduce) for t in st.op.input_tensors}
    for stage in s.stages:
        op = stage.op
        if not isinstance(op, ComputeOp) or op is out.op or isinstance(op.body[0], Reduce):
            continue
        # NOTE: padding stays a stage of its own: inlined, its bounds test sits in the
        # innermost reduction loop and costs ~10x on 3x3 convolutions.
        if id(op) not in feeds_reduction:
            stage.compute_inline()
    for stage in s.stages:
        op = stage.op
        if not isinstance(op, ComputeOp) or stage.attach_type == "inline":
            continue
        axes = list(stage.leaf_iter_vars[:len(op.axis)])
        if isinstance(op.body[0], Reduce) and len(axes) > 1:
            # NOTE: the innermost spatial loop goes inside the reduction, so the inner loop
            # updates independent outputs and LLVM can vectorise it (no reassociation needed).
            stage.reorder(*axes[:-1], *op.reduce_axis, axes[-1])
        n, extent = 0, 1
        while n < len(axes) - 1 and extent < _PARALLEL_MIN:
            extent *= int(op.axis[n].dom.extent.value)
            n += 1
        if n == 0:
            continue
        fused = stage.fuse(*axes[:n]) if n > 1 else axes[0]
        stage.parallel(fused)
    return s


def schedule_group(group: FusedGroup, target: Target, use_records: bool = True
                   ) -> tuple[Any, list[te.Tensor], str, bool]:
    """``(schedule, tensors, workload_key, tuned)`` for one group."""
    tensors = group.to_tensors()
    dag = ComputeDAG(tensors)
    key = dag.workload_key()
    ctx = ApplyHistoryBest.current() if use_records else None
    state = ctx.query(target, key) if ctx is not None else None
    if state is not None:
        full = dag.replay(state.transform_steps)
        # NOTE: the same layout-rewrite option as extract_tasks' tasks were measured with.
        lro = 1 if target.kind == "llvm" else 0
        sch, args = dag.apply_steps_from_state(full, layout_rewrite=lro,
                                               is_gpu=target.kind == "cuda")
        return sch, list(args), key, True
    return default_schedule(tensors), tensors, key, False


class GraphExecutorFactoryModule:
    """What :func:`build` returns: the compiled groups plus the bound parameters.

    ``lib["default"](dev)`` gives the runtime that ``GraphModule`` wraps, as in TVM."""

    def __init__(self, func: Function, groups: list[CompiledGroup], params: dict[str, np.ndarray],
                 target: Target) -> None:
        self.func, self.groups, self.params, self.target = func, groups, params, target

    def __getitem__(self, key: str) -> Any:
        if key != "default":
            raise KeyError(f"a built network exposes only 'default', not {key!r}")
        from .executor import GraphRuntime

        return lambda dev=None: GraphRuntime(self)

    def get_params(self) -> dict[str, np.ndarray]:
        return dict(self.params)

    @property
    def num_tuned(self) -> int:
        return sum(g.tuned for g in self.groups)

    def __repr__(self) -> str:
        return (f"GraphExecutorFactoryModule({len(self.groups)} kernels, {self.num_tuned} tuned, "
                f"target={self.target})")


def _numpy(x: Any) -> np.ndarray:
    """A numpy view of an array or an ``NDArray``."""
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def _check_params(func: Function, params: dict[str, Any]) -> dict[str, np.ndarray]:
    byname = {v.name: v for v in func.params}
    out: dict[str, np.ndarray] = {}
    for name, value in params.items():
        v = byname.get(name)
        if v is None:
            raise GraphError(f"parameter {name!r} is not an input of the network")
        arr = np.ascontiguousarray(np.asarray(_numpy(value), dtype=v.dtype))
        if arr.shape != v.shape:
            raise GraphError(f"parameter {name!r} has shape {arr.shape}, expected {v.shape}")
        out[name] = arr
    return out


def build(mod: Function, target: Any = None, params: dict[str, Any] | None = None,
          target_host: Any = None) -> GraphExecutorFactoryModule:
    """Compile a network (``relay.build``): fuse, schedule, and build every group.

    Parameters
    ----------
    mod : Function
        The network (``mod["main"]`` also works).
    target : str or Target, optional
        Default: the enclosing ``with Target(...)``, else ``llvm``.
    params : dict of str to array, optional
        Values bound to parameters (weights); the remaining variables are run-time inputs.

    Returns
    -------
    GraphExecutorFactoryModule
    """
    if not isinstance(mod, Function):
        raise GraphError(f"build expects a graph Function, got {type(mod).__name__}")
    tgt = Target(target) if isinstance(target, str) else (target or Target.current()
                                                          or Target("llvm"))
    if tgt.kind != "llvm":
        raise GraphError(f"networks run on llvm (CPU) targets, not {tgt.kind!r}; for a GPU, "
                         f"tune the tasks of extract_tasks(mod, params, 'cuda') and build them "
                         f"one by one")
    bound = _check_params(mod, params or {})
    pc = PassContext.current()
    compiled: list[CompiledGroup] = []
    cache: dict[str, tuple[Any, bool]] = {}
    for group in partition(mod, pc.fuse, pc.max_fuse_depth):
        sch, tensors, key, tuned = schedule_group(group, tgt, pc.use_auto_scheduler)
        if key not in cache:
            cache[key] = (templtune.build(sch, tensors, target=tgt, name=group.name), tuned)
        kernel, tuned = cache[key]
        compiled.append(CompiledGroup(group, kernel, key, tuned))
    n_tuned = sum(c.tuned for c in compiled)
    if n_tuned < len(compiled):
        logger.info("%d of %d kernels use the default schedule (no tuned record)",
                    len(compiled) - n_tuned, len(compiled))
    return GraphExecutorFactoryModule(mod, compiled, bound, tgt)


def input_vars(mod: Function, params: dict[str, Any]) -> list[Var]:
    """The network's run-time inputs (its variables that are not bound parameters)."""
    return [v for v in mod.params if v.name not in params]
