"""CPU states whose heavy stages cannot use every core are not worth a trial.

A reduction stage runs on as many threads as the parallel loop around it has iterations. When
the tile sizes leave that loop with fewer iterations than the target has cores (say all of a
7x7x512 conv2d output under one outer iteration), the kernel runs on one core however it was
annotated. TVM measures candidates on every core, so such states only cost trials there; a run
measured on fewer threads than the target has (``TEMPLTUNE_NUM_THREADS=1``, which keeps
measurements steady on a shared machine) cannot see the difference and may pick one, a state
that then does not scale when deployed on every core.
"""

from __future__ import annotations

import math
from typing import Any

from .loop_state import ANN_PARALLEL, INLINED, REDUCTION, SPATIAL, State


def parallel_degree(state: State, k: int) -> int:
    """Iterations of the outermost parallel loop around stage ``k``'s computation: that of a
    stage it is (transitively) computed at, when that loop encloses the attach point, else its
    own; 1 when no parallel loop encloses it."""
    outer = _enclosing(state, k)
    if outer > 1:
        return outer
    own = _parallel_iter(state, k)
    return 1 if own is None else int(state.stages[k].iters[own].range or 1)


def _enclosing(state: State, k: int) -> int:
    """Iterations of the parallel loop of the stages ``k`` is computed at that encloses it."""
    at = state.attached_to(k)
    if at is None:
        return 1
    target, iter_id = at
    tpar = _parallel_iter(state, target)
    if tpar is not None and tpar <= iter_id:
        return int(state.stages[target].iters[tpar].range or 1)
    return _enclosing(state, target)


def _parallel_iter(state: State, k: int) -> int | None:
    return next((i for i, it in enumerate(state.stages[k].iters)
                 if it.annotation == ANN_PARALLEL), None)


def uses_all_cores(state: State, num_cores: int) -> bool:
    """Whether every non-inlined stage with a reduction runs under a parallel loop of at least
    ``num_cores`` iterations, or of its whole output when that is smaller (a full reduction to
    a few values has no spatial parallelism to give)."""
    if num_cores <= 1:
        return True
    for k, st in enumerate(state.stages):
        if st.op_type == 0 or st.compute_at == INLINED:
            continue
        if not any(it.iter_kind == REDUCTION for it in st.iters):
            continue
        space = math.prod(it.range or 1 for it in st.iters if it.iter_kind == SPATIAL)
        if parallel_degree(state, k) < min(num_cores, space):
            return False
    return True


def worth_measuring(policy: Any, state: State | None) -> bool:
    """Whether a sampled or mutated CPU state passes :func:`uses_all_cores` for the task's
    cores (when ``params["cpu_parallel_all_cores"]``, the CPU default; never on GPU)."""
    if state is None or policy.is_gpu:
        return state is not None
    want = policy.params.get("cpu_parallel_all_cores", 1)
    return not want or uses_all_cores(state, policy.num_cores)
