"""Sketch generation: rules as data (condition -> skip / apply / apply-and-skip-rest)."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .access import CONST_TENSOR_ATTR, elementwise_match, no_split_iters
from .loop_state import INLINED, REDUCTION, SPATIAL, State
from .transform_step import CacheWriteStep, RfactorStep, SplitStep


class Cond(enum.Enum):
    SKIP = 0
    APPLY = 1
    APPLY_AND_SKIP_REST = 2


@dataclass(frozen=True, slots=True)
class SketchRule:
    """``condition(policy, state, stage_id) -> Cond``; ``apply(...) -> [(state, next_id)]``."""

    name: str
    condition: Callable[[Any, State, int], Cond]
    apply: Callable[[Any, State, int], list[tuple[State, int]]]


# ---- state queries ----------------------------------------------------------------------------

def acc(state: State, k: int) -> Any:
    return state.struct.access[k]


def _linked(state: State, k: int, field: str) -> list[int]:
    """Stages linked to ``k`` by the access field ``read_by`` / ``read_from``, looking through
    inlined stages (first-seen order, no repeats)."""
    out: list[int] = []
    for c in getattr(acc(state, k), field):
        if state.stages[c].compute_at == INLINED:
            out += [x for x in _linked(state, c, field) if x not in out]
        elif c not in out:
            out.append(c)
    return out


def consumers(state: State, k: int) -> list[int]:
    return _linked(state, k, "read_by")


def producers(state: State, k: int) -> list[int]:
    return _linked(state, k, "read_from")


def ew_match(state: State, p: int, c: int) -> bool:
    """Element-wise match from ``p`` to ``c`` through inlined single-consumer stages."""
    sch, a = state.struct.sch, state.struct.access
    cur = p
    for _ in range(len(state.stages)):
        direct = a[cur].read_by
        if len(direct) != 1 or not elementwise_match(sch, a, cur, direct[0]):
            return False
        cur = direct[0]
        if cur == c:
            return True
        if state.stages[cur].compute_at != INLINED:
            return False
    return False


def single_ew_consumer(state: State, k: int) -> int | None:
    cs = consumers(state, k)
    if len(cs) == 1 and ew_match(state, k, cs[0]):
        return cs[0]
    return None


def has_cache_write(state: State, k: int) -> bool:
    return any(isinstance(s, CacheWriteStep) and s.stage_id == k for s in state.transform_steps)


def has_rfactor(state: State, k: int) -> bool:
    return any(isinstance(s, RfactorStep) and s.stage_id + 1 == k
               for s in state.transform_steps)


def is_tiled(state: State, k: int) -> bool:
    return any(".0" in it.name or "@" in it.name for it in state.stages[k].iters)


def needs_mlt(state: State, k: int) -> bool:
    return acc(state, k).needs_multi_level_tiling


# ---- multi-level tiling -----------------------------------------------------------------------

def multi_level_tiling(state: State, k: int, structure: str) -> tuple[State, list[int]]:
    """Split spatial iterators into #S and reduce iterators into #R parts, reorder level by
    level. Returns the state and the spatial split step ids (in iterator order)."""
    n_s, n_r = structure.count("S"), structure.count("R")
    keep = set(no_split_iters(acc(state, k)))
    iters = state.stages[k].iters
    levels_s: list[list[int]] = [[] for _ in range(n_s)]
    levels_r: list[list[int]] = [[] for _ in range(n_r)]
    unsplit_s: list[int] = []
    unsplit_r: list[int] = []
    plan = []  # (orig index, kind, n parts or 1)
    for i, it in enumerate(iters):
        if it.iter_kind == SPATIAL:
            plan.append((i, "S", 1 if it.name in keep else n_s))
        elif it.iter_kind == REDUCTION:
            plan.append((i, "R", 1 if it.name in keep else n_r))
        else:
            plan.append((i, "S", 1))
    split_ids: dict[int, int] = {}
    for i, _kind, n in reversed(plan):
        if n > 1:
            split_ids[i] = len(state.transform_steps)
            state = state.split(k, i, [None] * (n - 1))
    pos = 0
    for _i, kind, n in plan:
        ids = list(range(pos, pos + n))
        pos += n
        lv = levels_s if kind == "S" else levels_r
        if n == 1:
            (unsplit_s if kind == "S" else unsplit_r).append(ids[0])
        else:
            for lvl, x in enumerate(ids):
                lv[lvl].append(x)
    order: list[int] = []
    si = ri = 0
    for ch in structure:
        if ch == "S":
            order += levels_s[si]
            si += 1
            if si == n_s:
                order += unsplit_s
        else:
            order += levels_r[ri]
            ri += 1
            if ri == n_r:
                order += unsplit_r
    rest = [x for x in range(pos) if x not in order]
    order += rest
    state = state.reorder(k, order)
    spatial_steps = [split_ids[i] for i, kind, n in plan if kind == "S" and n > 1]
    return state, spatial_steps


def follow_tiling(state: State, c: int, split_steps: list[int], level: int) -> State:
    """Tile consumer ``c`` following the producer's spatial splits (n_split = level)."""
    n = len(state.stages[c].iters)
    if n != len(split_steps):
        raise ValueError("follow_tiling: iterator count differs from the split count")
    for i in reversed(range(n)):
        state = state.follow_split(c, i, split_steps[i], level)
    parts = level + 1
    order = [i * parts + lv for lv in range(parts) for i in range(n)]
    return state.reorder(c, order)


# ---- rules ------------------------------------------------------------------------------------

def _cache_read_cond(p: Any, s: State, k: int) -> Cond:
    cs = acc(s, k).read_by
    if not cs or s.stages[k].compute_at == INLINED:
        return Cond.SKIP
    c = cs[0]
    if not needs_mlt(s, c) or s.stages[c].compute_at == INLINED:
        return Cond.SKIP
    if has_cross_thread_reduction(s, c):
        return Cond.SKIP
    return Cond.APPLY_AND_SKIP_REST


def _outer_reduce_iter(s: State, c: int) -> int | None:
    """The last iterator of the outermost reduce tile of (tiled) stage ``c``."""
    iters = s.stages[c].iters
    first = [i for i, it in enumerate(iters) if it.iter_kind == REDUCTION]
    if not first:
        return None
    i = first[0]
    while i + 1 < len(iters) and iters[i + 1].iter_kind == REDUCTION:
        i += 1
    return i


def _cache_read(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    for c in list(acc(s, k).read_by):
        if s.stages[c].compute_at == INLINED:
            continue
        s = s.cache_read(k, "shared", [c])
        c += 1 if c > k else 0
        at = _outer_reduce_iter(s, c)
        if at is not None:
            s = s.compute_at(k + 1, c, at)
    return [(s, k)]


def _always_inline_cond(p: Any, s: State, k: int) -> Cond:
    st = s.stages[k]
    a = acc(s, k)
    if st.op_type == 0 or a.is_output or a.has_reduce or st.compute_at == INLINED:
        return Cond.SKIP
    if p.is_gpu or a.is_strictly_inlineable:
        return Cond.APPLY_AND_SKIP_REST
    return Cond.SKIP


def _always_inline(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    return [(s.compute_inline(k), k - 1)]


def _needs_rfactor(p: Any, s: State, k: int) -> bool:
    a = acc(s, k)
    space, red = math.prod(a.spatial_extents), math.prod(a.reduce_extents)
    if a.needs_multi_level_tiling:
        return space <= red and space <= 16 * p.num_cores
    return red > 1 and red > p.num_cores


def _const_tensor_cond(p: Any, s: State, k: int) -> Cond:
    if s.stages[k].op_type == 0 or CONST_TENSOR_ATTR not in acc(s, k).attrs:
        return Cond.SKIP
    return Cond.APPLY_AND_SKIP_REST


def _const_tensor(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    names = set(acc(s, k).attrs[CONST_TENSOR_ATTR])
    iters = s.stages[k].iters
    plan = [(i, it.name in names) for i, it in enumerate(iters)]
    for i, unroll in reversed(plan):
        if not unroll:
            if iters[i].iter_kind != SPATIAL:
                return []
            s = s.split(k, i, [None])
    outer, inner, unrolled = [], [], []
    pos = 0
    for _i, unroll in plan:
        if unroll:
            unrolled.append(pos)
            pos += 1
        else:
            outer.append(pos)
            inner.append(pos + 1)
            pos += 2
    for u in unrolled:
        s = s.unroll(k, u)
    return [(s.reorder(k, outer + inner + unrolled), k - 1)]


def _rfactor_cond(p: Any, s: State, k: int) -> Cond:
    if s.stages[k].op_type == 0 or not acc(s, k).has_reduce or has_cache_write(s, k):
        return Cond.SKIP
    if has_rfactor(s, k) or s.stages[k].op_name.endswith(".rf"):
        return Cond.SKIP
    return Cond.APPLY if _needs_rfactor(p, s, k) else Cond.SKIP


def _rfactor(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    iters = s.stages[k].iters
    red = [i for i, it in enumerate(iters) if it.iter_kind == REDUCTION]
    n_sp = sum(1 for it in iters if it.iter_kind == SPATIAL)
    if red != list(range(red[0], red[0] + len(red))):
        return []
    base = s.fuse(k, red) if len(red) > 1 else s
    r = red[0]
    base = base.split(k, r, [None])
    out = []
    s1 = base.rfactor(k, r, n_sp)
    out.append((s1, k - 1))
    s2 = base.rfactor(k, r + 1, n_sp)
    n = len(s2.stages[k].iters)
    order = [i for i in range(n) if i != n_sp] + [n_sp]
    s2 = s2.reorder(k, order)
    out.append((s2, k - 1))
    return out


def _cache_write_cond(p: Any, s: State, k: int) -> Cond:
    if s.stages[k].op_type == 0 or not needs_mlt(s, k) or has_cache_write(s, k):
        return Cond.SKIP
    if s.stages[k].op_name.endswith(".local"):
        return Cond.SKIP
    if single_ew_consumer(s, k) is not None:
        return Cond.SKIP
    return Cond.APPLY_AND_SKIP_REST if p.is_gpu else Cond.APPLY


def _cache_write(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    return [(s.cache_write(k, "local"), k)]


def _mlt_fusion_cond(p: Any, s: State, k: int) -> Cond:
    if s.stages[k].op_type == 0 or not needs_mlt(s, k):
        return Cond.SKIP
    c = single_ew_consumer(s, k)
    if c is None or (acc(s, k).has_reduce and acc(s, c).has_reduce):
        return Cond.SKIP
    if s.stages[c].op_name.endswith(".shared"):
        return Cond.SKIP
    if p.is_gpu or has_cache_write(s, k):
        return Cond.APPLY_AND_SKIP_REST
    return Cond.APPLY


def _mlt_fusion(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    c = single_ew_consumer(s, k)
    assert c is not None
    tiled, steps = multi_level_tiling(s, k, p.structure)
    out = []
    levels = (3,) if p.is_gpu else (1, 2)
    for level in levels:
        if p.structure[level - 1] != "S":
            continue
        t = follow_tiling(tiled, c, steps, level)
        t = t.compute_at(k, c, level * len(steps) - 1)
        out.append((t, k - 1))
    return out


def _mlt_cond(p: Any, s: State, k: int) -> Cond:
    if s.stages[k].op_type == 0 or not needs_mlt(s, k) or is_tiled(s, k):
        return Cond.SKIP
    return Cond.APPLY_AND_SKIP_REST


def _mlt(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    return [(multi_level_tiling(s, k, p.structure)[0], k - 1)]


def _skip_cond(p: Any, s: State, k: int) -> Cond:
    return Cond.APPLY


def _skip(p: Any, s: State, k: int) -> list[tuple[State, int]]:
    return [(s, k - 1)]


RULE_ALWAYS_INLINE = SketchRule("AlwaysInline", _always_inline_cond, _always_inline)
RULE_CONST_TENSOR = SketchRule("SimplifyComputeWithConstTensor", _const_tensor_cond,
                               _const_tensor)
RULE_ADD_RFACTOR = SketchRule("AddRfactor", _rfactor_cond, _rfactor)
RULE_ADD_CACHE_WRITE = SketchRule("AddCacheWrite", _cache_write_cond, _cache_write)
RULE_MLT_FUSION = SketchRule("MultiLevelTilingWithFusion", _mlt_fusion_cond, _mlt_fusion)
RULE_MLT = SketchRule("MultiLevelTiling", _mlt_cond, _mlt)
RULE_SKIP_STAGE = SketchRule("SkipStage", _skip_cond, _skip)

CPU_RULES = (RULE_ALWAYS_INLINE, RULE_CONST_TENSOR, RULE_ADD_RFACTOR, RULE_ADD_CACHE_WRITE, RULE_MLT_FUSION,
             RULE_MLT, RULE_SKIP_STAGE)
RULE_ADD_CACHE_READ = SketchRule("AddCacheRead", _cache_read_cond, _cache_read)

# NOTE: imported here, after the helpers it uses are defined (sketch_gpu imports this module)
from .sketch_gpu import (  # noqa: E402
    RULE_CROSS_THREAD_REDUCTION,
    RULE_SPECIAL_COMPUTE_LOCATION_GPU,
    has_cross_thread_reduction,
)

GPU_RULES = (RULE_ADD_CACHE_READ, RULE_SPECIAL_COMPUTE_LOCATION_GPU, RULE_ALWAYS_INLINE,
             RULE_CONST_TENSOR, RULE_CROSS_THREAD_REDUCTION, RULE_ADD_CACHE_WRITE,
             RULE_MLT_FUSION, RULE_MLT, RULE_SKIP_STAGE)


def generate_sketches(policy: Any, init_state: State, rules: Any) -> list[State]:
    """All sketches, in frontier order."""
    out: list[State] = []
    frontier = [(init_state, len(init_state.stages) - 1)]
    while frontier:
        nxt: list[tuple[State, int]] = []
        for s, k in frontier:
            if k < 0:
                out.append(s)
                continue
            for rule in rules:
                c = rule.condition(policy, s, k)
                if c is Cond.SKIP:
                    continue
                nxt += rule.apply(policy, s, k)
                if c is Cond.APPLY_AND_SKIP_REST:
                    break
        frontier = nxt
    return out


__all__ = ["SketchRule", "Cond", "generate_sketches", "CPU_RULES", "GPU_RULES", "SplitStep"]
