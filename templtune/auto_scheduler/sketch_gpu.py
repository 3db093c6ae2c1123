"""GPU-only sketch rules: CrossThreadReduction and SpecialComputeLocationGPU (spec §6.6).

CrossThreadReduction binds (part of) a stage's fused reduction to ``threadIdx.x``; the CUDA
backend lowers such a reduction to a shared-memory all-reduce. SpecialComputeLocationGPU
attaches an element-wise producer of a const-tensor consumer (winograd transforms) inside the
consumer just before its unrolled iterators instead of inlining it.
"""

from __future__ import annotations

import math
from typing import Any

from .access import CONST_TENSOR_ATTR, num_common_outer
from .loop_state import ANN_THREAD_X, ANN_UNROLL, INLINED, REDUCTION, State
from .sketch import (
    Cond,
    SketchRule,
    _always_inline_cond,
    acc,
    consumers,
    has_cache_write,
    needs_mlt,
    producers,
)
from .transform_step import SplitStep


def has_cross_thread_reduction(state: State, k: int) -> bool:
    """Stage ``k``, or a stage attached to it, has a reduce iterator bound to threadIdx.x."""
    def check(j: int) -> bool:
        return any(it.iter_kind == REDUCTION and it.annotation == ANN_THREAD_X
                   for it in state.stages[j].iters)

    if check(k):
        return True
    return any(check(j) for j in state.attached_stages(k))


def _warp(p: Any) -> int:
    return max(1, int(p.task.hardware_params.warp_size or 32))


def _ctr_cond(p: Any, s: State, k: int) -> Cond:
    st = s.stages[k]
    if st.op_type == 0 or st.compute_at == INLINED or has_cache_write(s, k):
        return Cond.SKIP
    a = acc(s, k)
    space, red = math.prod(a.spatial_extents), math.prod(a.reduce_extents)
    if needs_mlt(s, k):
        # NOTE: enough spatial parallelism for the threads of a block: tile instead
        if space > int(p.task.hardware_params.max_threads_per_block or 1024):
            return Cond.SKIP
        return Cond.APPLY if space < red else Cond.SKIP
    if red > 1 and red > _warp(p):
        return Cond.APPLY
    return Cond.SKIP


def _split_steps_of(s: State, k: int) -> list[int]:
    from .init_rules import steps_of_stage

    return [n for n in steps_of_stage(s, k) if isinstance(s.transform_steps[n], SplitStep)]


def _ctr(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    warp = _warp(p)
    iters = s.stages[k].iters
    red = [i for i, it in enumerate(iters) if it.iter_kind == REDUCTION]
    if not red or red != list(range(red[0], red[0] + len(red))):
        return []
    t = s.fuse(k, red) if len(red) > 1 else s
    r = red[0]
    cs = consumers(t, k)
    c = cs[0] if len(cs) == 1 else None
    n_common = 0
    if c is not None:
        n_common = num_common_outer(t.struct.sch, t.struct.access, k, c)
    if c is not None and n_common > 0 and not needs_mlt(t, c):
        # fuse the reduction into its consumer: both share the consumer's threadIdx.x split
        splits = _split_steps_of(t, c)
        if not splits:
            last = len(t.stages[c].iters) - 1
            t = t.split(c, last, [warp])
            t = t.bind(c, last + 1, "threadIdx.x")
            splits = [len(t.transform_steps) - 2]
        if len(splits) == 1:
            t = t.follow_split(k, r, splits[0], 1)
            t = t.bind(k, r + 1, "threadIdx.x")
            t = t.compute_at(k, c, n_common - 1)
            return [(t, k - 1)]
        t = s.fuse(k, red) if len(red) > 1 else s
    t = t.split(k, r, [warp])
    t = t.bind(k, r + 1, "threadIdx.x")
    return [(t, k - 1)]


def _first_unrolled(s: State, c: int) -> int | None:
    for i, it in enumerate(s.stages[c].iters):
        if it.annotation == ANN_UNROLL:
            return i
    return None


def _special_loc_cond(p: Any, s: State, k: int) -> Cond:
    if not producers(s, k) or _always_inline_cond(p, s, k) is not Cond.APPLY_AND_SKIP_REST:
        return Cond.SKIP
    cs = consumers(s, k)
    if len(cs) != 1 or CONST_TENSOR_ATTR not in acc(s, cs[0]).attrs:
        return Cond.SKIP
    u = _first_unrolled(s, cs[0])
    return Cond.APPLY_AND_SKIP_REST if u is not None and u > 0 else Cond.SKIP


def _special_loc(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    c = consumers(s, k)[0]
    u = _first_unrolled(s, c)
    assert u is not None
    return [(s.compute_at(k, c, u - 1), k - 1)]


RULE_CROSS_THREAD_REDUCTION = SketchRule("CrossThreadReduction", _ctr_cond, _ctr)
RULE_SPECIAL_COMPUTE_LOCATION_GPU = SketchRule("SpecialComputeLocationGPU", _special_loc_cond,
                                               _special_loc)

__all__ = ["RULE_CROSS_THREAD_REDUCTION", "RULE_SPECIAL_COMPUTE_LOCATION_GPU",
           "has_cross_thread_reduction"]
