"""Random annotation of sketches (initial population) and mutations for evolution."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from .loop_state import ANN_NONE, INLINED, ROOT, SPATIAL, State
from .parallel_degree import worth_measuring
from .tile_prior import register_block_ok, sample_register_tiles
from .transform_step import FollowSplitStep, SplitStep

CPU_UNROLL = (0, 16, 64, 512)
#: unroll limits of register-tiled samples: a register block lives in registers only when its
#: loops (block rows x inner reduction steps) are unrolled (samples with 0, and 16 on conv2d,
#: ran far slower: benchmarks/results/auto_scheduler.txt).
CPU_UNROLL_REGISTER = (64, 512)
GPU_UNROLL = (0, 16, 64, 512, 1024)


@lru_cache(maxsize=4096)
def factorizations(extent: int, n: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """All ``n``-tuples of lengths whose product divides ``extent`` with innermost ≤ max."""
    out: list[tuple[int, ...]] = []

    def dfs(rem: int, acc: tuple[int, ...]) -> None:
        if len(acc) == n:
            if not acc or acc[-1] <= max_innermost:
                out.append(acc)
            return
        for d in range(1, rem + 1):
            if rem % d == 0:
                dfs(rem // d, acc + (d,))

    dfs(extent, ())
    return tuple(out)


def _replay(dag: Any, steps: list) -> State:
    return dag.replay(steps)


def use_register_tiles(policy: Any, rng: np.random.Generator) -> bool:
    """Whether one CPU sample follows the register-tile prior (probability
    ``params["cpu_register_tile_prior"]``; never on GPU)."""
    prior = 0.0 if policy.is_gpu else float(policy.params.get("cpu_register_tile_prior", 0.0))
    return prior > 0.0 and rng.random() < prior


def fill_tile_size(policy: Any, state: State, rng: np.random.Generator,
                   register_tiles: bool | None = None) -> State:
    """Random tile sizes for the unfilled splits of a sketch.

    With ``register_tiles`` (default: :func:`use_register_tiles`), the innermost spatial tile of
    every tiled stage is drawn register-sized (:mod:`.tile_prior`), so that the random initial
    population (all the first rounds measure, and what the evolution starts from) is not mostly
    spilling or scalar blocks.
    """
    if register_tiles is None:
        register_tiles = use_register_tiles(policy, rng)
    if not register_tiles:
        return _fill_tile_size(policy, state, rng)
    out = sample_register_tiles(policy, state, rng, factorizations)
    if out is not None:
        return out
    # NOTE: a sketch whose tiles cannot be traced to their splits: uniform draws until one
    # passes (about 1 in 10 does); a sketch none of whose first
    # 512 draws passed is sampled uniformly from then on.
    stats = policy.__dict__.setdefault("_prior_stats", {}).setdefault(id(state), [0, 0])
    out = _fill_tile_size(policy, state, rng)
    if stats[0] >= 512 and not stats[1]:
        return out
    for _ in range(128):
        stats[0] += 1
        if register_block_ok(policy, out):
            stats[1] += 1
            return out
        out = _fill_tile_size(policy, state, rng)
    return out


def _fill_tile_size(policy: Any, state: State, rng: np.random.Generator) -> State:
    steps = list(state.transform_steps)
    changed = False
    for k, s in enumerate(steps):
        if isinstance(s, SplitStep) and any(x is None for x in s.lengths):
            ext = s.extent
            if ext is None:
                # the extent after an earlier length choice: recompute from a replay
                cur = _replay(policy.dag, steps[:k])
                ext = cur.stages[s.stage_id].iters[s.iter_id].range
            if ext is None:
                raise ValueError("cannot fill a split of unknown extent")
            cands = factorizations(int(ext), len(s.lengths), policy.params[
                "max_innermost_split_factor"])
            pick = cands[int(rng.integers(len(cands)))]
            steps[k] = SplitStep(s.stage_id, s.iter_id, int(ext), tuple(pick), s.inner_to_outer)
            changed = True
    return _replay(policy.dag, steps) if changed else state


def _root_compute(state: State, k: int) -> bool:
    st = state.stages[k]
    return st.op_type == 1 and st.compute_at == ROOT


def _location_candidates(state: State, k: int) -> tuple[int, list[int]] | None:
    """(consumer, candidate iterator ids) for moving stage ``k``; None when not movable."""
    from .sketch import acc, consumers, is_tiled

    st = state.stages[k]
    if st.op_type == 0 or st.compute_at == INLINED or is_tiled(state, k):
        return None
    if acc(state, k).needs_multi_level_tiling or acc(state, k).is_output:
        return None
    cs = consumers(state, k)
    if len(cs) != 1 or state.stages[cs[0]].compute_at != ROOT:
        return None
    c = cs[0]
    tiled = is_tiled(state, c)
    cands: list[int] = []
    seen_reduce = False
    for i, it in enumerate(state.stages[c].iters):
        if it.annotation == 1:
            break
        if it.iter_kind == 1:
            if not tiled:
                break
            seen_reduce = True
        elif seen_reduce:
            break
        if it.range == 1:
            continue
        cands.append(i)
        if state.attached_stages(c, i):
            break
    return c, cands


def change_compute_location(policy: Any, state: State, rng: np.random.Generator) -> State:
    """CPU: move small non-tiled stages (e.g. padding) to a random loop of their consumer."""
    if policy.params["disable_change_compute_location"]:
        return state
    for k in range(len(state.stages) - 1, -1, -1):
        found = _location_candidates(state, k)
        if found is None:
            continue
        c, cands = found
        r = int(rng.integers(len(cands) + 2))
        if r == 0:
            from .sketch import acc

            if not acc(state, k).has_reduce and state.stages[k].compute_at != ROOT:
                state = state.compute_inline(k)
        elif r == 1:
            if state.stages[k].compute_at != ROOT:
                state = state.compute_root(k)
        else:
            state = state.compute_at(k, c, cands[r - 2])
    return state


def annotate_parallel(policy: Any, state: State, rng: np.random.Generator) -> State:
    limit = 16 * policy.num_cores
    for k in range(len(state.stages)):
        if not _root_compute(state, k):
            continue
        iters = state.stages[k].iters
        n, prod = 0, 1
        for i, it in enumerate(iters):
            if it.iter_kind != SPATIAL or it.annotation != ANN_NONE:
                break
            n += 1
            prod *= it.range or 1
            if prod > limit or state.attached_stages(k, i):
                break
        if n == 0:
            continue
        if n > 1:
            state = state.fuse(k, list(range(n)))
        state = state.parallel(k, 0)
    return state


def annotate_vectorize(policy: Any, state: State, rng: np.random.Generator) -> State:
    """Fuse a random number of the innermost spatial iterators (product at most
    ``max_vectorize_size``) and vectorize the result (TVM's InitVectorization)."""
    # NOTE: tiled stages fuse too (they used to vectorize the innermost iterator only): with
    # tiles like co.3=16, oh.3=ow.3=1 the fused loop is contiguous in the write cache and
    # vectorizes, which the innermost extent-1 iterator alone cannot.
    maxv = policy.params["max_vectorize_size"]
    for k in range(len(state.stages)):
        st = state.stages[k]
        if st.op_type == 0 or st.compute_at == INLINED:
            continue
        iters = st.iters
        count, prod = 0, 1
        for i in range(len(iters) - 1, -1, -1):
            it = iters[i]
            if it.iter_kind != SPATIAL or it.annotation != ANN_NONE or it.range is None:
                break
            if state.attached_stages(k, i):
                break
            prod *= it.range
            if prod > maxv:
                break
            count += 1
        if count == 0:
            continue
        n = 1 if count == 1 else int(rng.integers(1, count))
        last = len(iters) - 1
        if n > 1:
            state = state.fuse(k, list(range(last - n + 1, last + 1)))
            last = last - n + 1
        ext = state.stages[k].iters[last].range
        if ext is not None and ext > 1:
            state = state.vectorize(k, last)
    return state


def annotate_unroll(policy: Any, state: State, rng: np.random.Generator,
                    values: tuple[int, ...] | None = None) -> State:
    """An ``auto_unroll_max_step`` pragma with a random value on every stage with a reduction."""
    if values is None:
        values = GPU_UNROLL if policy.is_gpu else CPU_UNROLL
    for k in range(len(state.stages)):
        st = state.stages[k]
        if st.op_type == 0 or st.compute_at == INLINED or not st.iters:
            continue
        if any(it.iter_kind == 1 for it in st.iters):
            v = values[int(rng.integers(len(values)))]
            state = state.pragma(k, 0, f"auto_unroll_max_step${v}")
    return state


def annotate_thread_bind(policy: Any, state: State, rng: np.random.Generator) -> State:
    """GPU: bind tiled root stages (.0 → blockIdx.x, .1 → vthread, .2 → threadIdx.x) and
    untiled root stages (fused spatial loops split by the warp size)."""
    from .sketch import has_cross_thread_reduction, is_tiled

    warp = max(1, policy.task.hardware_params.warp_size)
    root_splits: list[int] = []
    for k in range(len(state.stages) - 1, -1, -1):
        st = state.stages[k]
        if st.op_type == 1 and st.op_name.endswith(".shared") and st.compute_at != ROOT:
            state = _bind_shared(state, k, root_splits)
            continue
        if not _root_compute(state, k):
            continue
        if has_cross_thread_reduction(state, k):
            state = _bind_ctr_root(state, k)
            continue
        if any(it.annotation == 6 for it in state.stages[k].iters):
            continue
        iters = state.stages[k].iters
        if is_tiled(state, k):
            pos = 0
            for level, tag in enumerate(("blockIdx.x", "vthread", "threadIdx.x")):
                iters = state.stages[k].iters
                n = 0
                while pos + n < len(iters) and iters[pos + n].iter_kind == SPATIAL and \
                        iters[pos + n].name.endswith(f".{level}"):
                    n += 1
                if n == 0:
                    break
                if n > 1:
                    state = state.fuse(k, list(range(pos, pos + n)))
                ext = state.stages[k].iters[pos].range or 1
                if tag == "vthread" and ext > policy.task.hardware_params.max_vthread_extent:
                    raise ValueError("vthread extent too large")
                if tag == "threadIdx.x" and ext < warp:
                    total = math.prod(it.range or 1 for it in state.stages[k].iters
                                      if it.iter_kind == SPATIAL)
                    if total > 2 * warp:
                        raise ValueError("fewer threads than a warp")
                state = state.bind(k, pos, tag)
                pos += 1
        else:
            n = 0
            for it in iters:
                if it.iter_kind != SPATIAL:
                    break
                n += 1
            if n == 0:
                continue
            if n > 1:
                state = state.fuse(k, list(range(n)))
            ext = state.stages[k].iters[0].range or 1
            if ext <= warp:
                state = state.bind(k, 0, "threadIdx.x")
            else:
                state = state.split(k, 0, [warp])
                state = state.bind(k, 0, "blockIdx.x").bind(k, 1, "threadIdx.x")
    return state


def _bind_ctr_root(state: State, k: int) -> State:
    """A root stage with a cross-thread reduction (its own or an attached stage's): fuse its
    outer unannotated spatial iterators, up to the attach point, and bind them to blockIdx.x."""
    iters = state.stages[k].iters
    n = 0
    for i, it in enumerate(iters):
        if it.iter_kind != SPATIAL or it.annotation != 0:
            break
        n += 1
        if state.attached_stages(k, i):
            break
    if n == 0:
        return state
    if n > 1:
        state = state.fuse(k, list(range(n)))
    return state.bind(k, 0, "blockIdx.x")


def steps_of_stage(state: State, k: int) -> list[int]:
    """Ids of the steps that acted on (current) stage ``k``, in order, following the stage
    through the id shifts of later stage-inserting steps."""
    from .transform_step import CacheReadStep, CacheWriteStep, RfactorStep

    out: list[int] = []
    cur = k
    for n in range(len(state.transform_steps) - 1, -1, -1):
        step = state.transform_steps[n]
        if isinstance(step, (CacheReadStep, CacheWriteStep, RfactorStep)):
            pos = step.stage_id + 1 if isinstance(step, CacheReadStep) else step.stage_id
            if cur == pos:
                break
            if cur > pos:
                cur -= 1
            continue
        if getattr(step, "stage_id", None) == cur:
            out.append(n)
    return out[::-1]


def _bind_shared(state: State, k: int, root_splits: list[int]) -> State:
    """Cooperative fetching: fuse, split by [1] and vectorize, then split by the thread count
    of the tiled consumer (follow_fused_split, level 1) and bind to threadIdx.x."""
    att = state.attached_to(k)
    if att is None:
        return state
    target = att[0]
    n_sp = len(state.struct.access[target].spatial_extents)
    sp = [n for n in steps_of_stage(state, target)
          if isinstance(state.transform_steps[n], SplitStep)
          and len(state.transform_steps[n].lengths) >= 2
          and state.transform_steps[n].iter_id < n_sp]
    n_it = len(state.stages[k].iters)
    if n_it > 1:
        state = state.fuse(k, list(range(n_it)))
    state = state.split(k, 0, [1])
    state = state.vectorize(k, 1)
    if sp:
        state = state.follow_fused_split(k, 0, sp, 1, True)
        state = state.bind(k, 1, "threadIdx.x")
    return state


def sample_one(policy: Any, sketch: State, rng: np.random.Generator) -> State | None:
    try:
        reg = use_register_tiles(policy, rng)
        s = fill_tile_size(policy, sketch, rng, reg)
        if policy.is_gpu:
            s = annotate_thread_bind(policy, s, rng)
            s = annotate_unroll(policy, s, rng)
        else:
            s = change_compute_location(policy, s, rng)
            s = annotate_parallel(policy, s, rng)
            s = annotate_unroll(policy, s, rng, CPU_UNROLL_REGISTER if reg else None)
            s = annotate_vectorize(policy, s, rng)
            if not worth_measuring(policy, s):
                return None
        return s
    except (ValueError, KeyError, IndexError, AssertionError) as exc:
        policy.logger.debug("dropped an invalid sample: %s", exc)
        return None
    except Exception as exc:  # noqa: BLE001 - a schedule error is an invalid sample
        policy.logger.debug("dropped an invalid sample: %s", exc)
        return None


__all__ = ["factorizations", "sample_one", "change_compute_location", "steps_of_stage",
           "CPU_UNROLL", "CPU_UNROLL_REGISTER", "GPU_UNROLL", "FollowSplitStep"]
