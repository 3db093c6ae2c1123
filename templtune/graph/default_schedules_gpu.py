"""The default schedule of a fused group on a GPU target (no tuning record, no template).

Every injective producer is inlined (padding, the element-wise tail, softmax's ``exp``: on a
GPU recomputing it is cheaper than a round trip through global memory); every remaining
stage becomes one kernel whose spatial loops are fused into one index, split into blocks of
threads and bound to ``blockIdx.x`` / ``threadIdx.x``, so that neighbouring threads write
neighbouring outputs (coalesced stores). A reduction with few outputs and a long reduction
axis (global pooling, softmax's max and sum over one row) instead gives each output a block
whose threads share the reduction (a cross-thread all-reduce), as TVM's ``schedule_reduce``
does.
"""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.target import Target
from templtune.te.expr import Reduce
from templtune.te.tensor import ComputeOp

from .default_schedules import register_default_schedule

__all__ = ["default_schedule_gpu"]

_THREADS = 256  # threads per block of an element-wise kernel (capped by the target's limit)
_REDUCE_THREADS = 32  # threads sharing one long reduction: one warp
_CROSS_MIN = 64  # reductions at least this long ...
_CROSS_MAX_OUT = 4096  # ... with at most this many outputs are shared across threads


def _extent(iv: Any) -> int:
    return int(iv.dom.extent.value)


def _is_reduce(op: Any) -> bool:
    return isinstance(op, ComputeOp) and isinstance(op.body[0], Reduce)


def _size(axes: list[Any]) -> int:
    n = 1
    for a in axes:
        n *= _extent(a)
    return n


def _bind_flat(stage: Any, axes: list[Any], threads: int) -> None:
    """Fuse ``axes``, split by ``threads`` (fewer when there is less work) and bind."""
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=max(1, min(threads, _size(axes))))
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))


def _cross_thread(s: Any, stage: Any, axes: list[Any], warp: int) -> bool:
    """One block per output, its threads sharing a single long reduction axis."""
    op = stage.op
    if len(op.reduce_axis) != 1 or not axes:
        return False
    k = op.reduce_axis[0]
    if _extent(k) < _CROSS_MIN or _size(axes) > _CROSS_MAX_OUT:
        return False
    _, ki = stage.split(k, factor=warp)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    stage.bind(fused, te.thread_axis("blockIdx.x"))
    stage.bind(ki, te.thread_axis("threadIdx.x"))
    return True


@register_default_schedule("gpu")
def default_schedule_gpu(tensors: list[te.Tensor], target: Target | None = None) -> Any:
    """Schedule of a group's computation for a GPU target: every stage bound to threads.

    Parameters
    ----------
    tensors : list of Tensor
        The group's inputs then its output (the output last).
    target : Target, optional
        Gives the threads per block and the warp size; default ``cuda``.

    Returns
    -------
    Schedule
    """
    caps = (target or Target("cuda")).capabilities
    threads = min(_THREADS, caps.max_threads_per_block or _THREADS)
    warp = min(_REDUCE_THREADS, caps.warp_size or _REDUCE_THREADS)
    out = tensors[-1]
    s = te.create_schedule(out.op)
    for stage in s.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and op is not out.op and not _is_reduce(op):
            stage.compute_inline()
    for stage in list(s.stages):
        if not isinstance(stage.op, ComputeOp) or stage.attach_type == "inline":
            continue
        axes = list(stage.leaf_iter_vars[:len(stage.op.axis)])
        if _is_reduce(stage.op) and _cross_thread(s, stage, axes, warp):
            continue
        if not axes:
            # NOTE: a scalar output: one thread (a 0-d compute has no loop to bind).
            continue
        _bind_flat(stage, axes, threads)
    return s
