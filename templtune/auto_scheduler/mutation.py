"""Mutations of the evolutionary search: tile size, auto-unroll, parallel width, compute
location. Each returns a new (replayed) state or None when the mutation is invalid."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .init_rules import CPU_UNROLL, GPU_UNROLL, _location_candidates
from .loop_state import ANN_NONE, SPATIAL, State
from .transform_step import AnnotationStep, FuseStep, PragmaStep, SplitStep


def _choice(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    """One element of ``seq``, uniformly (one ``rng.integers`` draw)."""
    return seq[int(rng.integers(len(seq)))]


def _try_replay(policy: Any, steps: list) -> State | None:
    """``steps`` replayed on the policy's DAG, or None when the mutation made them invalid."""
    try:
        return policy.dag.replay(steps)
    except Exception:  # noqa: BLE001 - invalid mutation
        return None


def mutate_tile_size(policy: Any, state: State, rng: np.random.Generator) -> State | None:
    steps = list(state.transform_steps)
    maxi = policy.params["max_innermost_split_factor"]
    cands = [k for k, s in enumerate(steps) if isinstance(s, SplitStep) and s.extent
             and all(x is not None for x in s.lengths) and s.lengths[-1] <= maxi
             and s.extent > 1]
    if not cands:
        return None
    k = _choice(rng, cands)
    s = steps[k]
    lens = [s.extent // math.prod(s.lengths), *s.lengths]
    order = rng.permutation(len(lens))
    for src in order:
        if lens[src] <= 1:
            continue
        dst = (src + 1) % len(lens)
        divs = [d for d in range(2, lens[src] + 1) if lens[src] % d == 0]
        if dst == len(lens) - 1:
            divs = [d for d in divs if lens[dst] * d <= maxi]
        if not divs:
            continue
        d = _choice(rng, divs)
        lens[src] //= d
        lens[dst] *= d
        steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, tuple(lens[1:]), s.inner_to_outer)
        return _try_replay(policy, steps)
    return None


def mutate_auto_unroll(policy: Any, state: State, rng: np.random.Generator) -> State | None:
    steps = list(state.transform_steps)
    cands = [k for k, s in enumerate(steps) if isinstance(s, PragmaStep)
             and s.pragma_type.startswith("auto_unroll_max_step")]
    if not cands:
        return None
    k = _choice(rng, cands)
    values = GPU_UNROLL if policy.is_gpu else CPU_UNROLL
    v = _choice(rng, values)
    s = steps[k]
    steps[k] = PragmaStep(s.stage_id, s.iter_id, f"auto_unroll_max_step${v}")
    return policy.dag.replay(steps)


def mutate_compute_location(policy: Any, state: State,
                            rng: np.random.Generator) -> State | None:
    """Move one compute_at step of a non-tiled stage to another candidate loop (replay)."""
    from .transform_step import ComputeAtStep

    steps = list(state.transform_steps)
    cands = [n for n, s in enumerate(steps) if isinstance(s, ComputeAtStep)]
    rng.shuffle(cands)
    for n in cands:
        pre = policy.dag.replay(steps[:n])
        step = steps[n]
        found = _location_candidates(pre, step.stage_id)
        if found is None or found[0] != step.target_stage_id or len(found[1]) < 2:
            continue
        choices = [i for i in found[1] if i != step.target_iter_id]
        new = _choice(rng, choices)
        steps[n] = ComputeAtStep(step.stage_id, step.target_stage_id, new)
        return _try_replay(policy, steps)
    return None


def mutate_parallel(policy: Any, state: State, rng: np.random.Generator) -> State | None:
    """Change the number of leading iterators fused into a parallel loop (replay; invalid when
    a later step on that stage depends on the iterator ids)."""
    steps = list(state.transform_steps)
    cands = [k for k in range(1, len(steps)) if isinstance(steps[k], AnnotationStep)
             and steps[k].annotation == 3 and steps[k].iter_id == 0
             and isinstance(steps[k - 1], FuseStep) and steps[k - 1].fused_ids[0] == 0
             and steps[k - 1].stage_id == steps[k].stage_id]
    if not cands:
        return None
    k = _choice(rng, cands)
    fu = steps[k - 1]
    later = [s for s in steps[k + 1:] if getattr(s, "stage_id", None) == fu.stage_id]
    if any(not isinstance(s, (AnnotationStep, PragmaStep)) for s in later):
        return None
    pre = policy.dag.replay(steps[:k - 1])
    iters = pre.stages[fu.stage_id].iters
    maxn = 0
    for it in iters:
        if it.iter_kind != SPATIAL or it.annotation != ANN_NONE:
            break
        maxn += 1
    if maxn < 2:
        return None
    new_n = int(rng.integers(1, maxn + 1))
    old_n = len(fu.fused_ids)
    if new_n == old_n:
        return None
    shift = (old_n - new_n)
    new_steps = steps[:k - 1]
    if new_n > 1:
        new_steps.append(FuseStep(fu.stage_id, tuple(range(new_n))))
    new_steps.append(steps[k])
    for s in steps[k + 1:]:
        if getattr(s, "stage_id", None) == fu.stage_id and s.iter_id > 0:
            s = type(s)(*[getattr(s, f) for f in s.__dataclass_fields__])  # copy
            object.__setattr__(s, "iter_id", s.iter_id + shift)
        new_steps.append(s)
    return _try_replay(policy, new_steps)



__all__ = ["mutate_tile_size", "mutate_auto_unroll", "mutate_parallel",
           "mutate_compute_location"]
