"""Loop transform steps that restructure a stage's iterators (split, follow splits, reorder,
fuse). Each updates a :class:`State`, replays onto a te schedule, encodes to the v0.6 record
JSON and prints as Python schedule code. The steps that only mark an iterator (annotation,
pragma, storage align) live in :mod:`.steps_annotation` and are re-exported here.

Placement steps (compute_at / inline / root) are applied to the te schedule *after* all loop
steps, from the final state's attach map: later fuses and splits of the target stage move the
attach point in the state (as Ansor's attach map does) and te only sees the final leaf.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from templtune.errors import ScheduleError

from .loop_state import (
    ANN_NONE,
    MIXED,
    REDUCTION,
    Iterator,
    State,
    replace_stage,
    with_step,
)

# NOTE: re-exported: the annotation steps lived here before; imports of this path keep working
from .steps_annotation import KNOWN_PRAGMAS, AnnotationStep, PragmaStep, StorageAlignStep

__all__ = [
    "AnnotationStep", "FollowFusedSplitStep", "FollowSplitStep", "FuseStep", "KNOWN_PRAGMAS",
    "PragmaStep", "ReorderStep", "SplitStep", "StorageAlignStep",
]


def _err(msg: str) -> ScheduleError:
    return ScheduleError(msg)


def _remap_attach(state: State, stage_id: int, mapping: dict[int, int]) -> tuple:
    """Move attach points on ``stage_id``'s iterators through ``mapping`` (old -> new id)."""
    return tuple(sorted((s, t, mapping.get(i, i) if t == stage_id else i)
                        for s, t, i in state.attach_map))


def _with_iters(state: State, step: Any, sid: int, st: Any, iters: tuple,
                mapping: dict[int, int], **kw: Any) -> State:
    """``state`` plus ``step``, with stage ``sid``'s iterators replaced by ``iters`` and its
    attach points moved through ``mapping`` (old -> new iterator id)."""
    return with_step(state, step, stages=replace_stage(state, sid, dataclasses.replace(
        st, iters=iters)), attach_map=_remap_attach(state, sid, mapping), **kw)


def _te_leaves(ctx: Any, sid: int, ids: tuple) -> tuple[Any, list]:
    """The te stage ``sid`` and its leaf iteration variables at positions ``ids``."""
    tst = ctx.sch.stages[sid]
    leaves = list(tst.leaf_iter_vars)
    return tst, [leaves[i] for i in ids]


def _split_lengths(ext: int | None, lengths: tuple, inner_to_outer: bool) -> list[int | None]:
    """Extents of the n+1 parts of a split (outermost first)."""
    known = all(x is not None for x in lengths)
    rest = None if ext is None or not known else math.ceil(
        ext / max(1, math.prod(lengths)))  # type: ignore[arg-type]
    return [rest, *lengths] if inner_to_outer else [*lengths, rest]


def _do_split(state: State, step: Any, sid: int, iid: int, lengths: tuple,
              inner_to_outer: bool) -> State:
    st = state.stages[sid]
    if st.op_type == 0:
        raise _err(f"cannot split placeholder stage {st.op_name}")
    it = st.iters[iid]
    parts = _split_lengths(it.range, lengths, inner_to_outer)
    new_iters = tuple(Iterator(f"{it.name}.{k}", e, it.iter_kind, ANN_NONE)
                      for k, e in enumerate(parts))
    iters = st.iters[:iid] + new_iters + st.iters[iid + 1:]
    n = len(new_iters) - 1
    mapping = {i: (i if i < iid else i + n) for i in range(len(st.iters))}
    mapping[iid] = iid + n
    concrete = state.concrete and all(x is not None for x in lengths)
    return _with_iters(state, step, sid, st, iters, mapping, concrete=concrete)


def _te_split(ctx: Any, sid: int, iid: int, lengths: tuple, inner_to_outer: bool) -> None:
    tst = ctx.sch.stages[sid]
    leaf = tst.leaf_iter_vars[iid]
    ls = [1 if x is None else int(x) for x in lengths]
    if inner_to_outer:
        cur = leaf
        for f in reversed(ls):
            cur, _ = tst.split(cur, factor=f)
    else:
        cur = leaf
        for f in ls:
            _, cur = tst.split(cur, nparts=f)


@dataclass(frozen=True, slots=True)
class SplitStep:
    stage_id: int
    iter_id: int
    extent: int | None
    lengths: tuple
    inner_to_outer: bool
    prefix: ClassVar[str] = "SP"

    def encode(self) -> list:
        return ["SP", self.stage_id, self.iter_id, self.extent or 0,
                [int(x) if x is not None else 0 for x in self.lengths], int(self.inner_to_outer)]

    @staticmethod
    def decode(r: list) -> SplitStep:
        return SplitStep(r[1], r[2], r[3] or None, tuple(x or None for x in r[4]), bool(r[5]))

    def apply_to_state(self, state: State) -> State:
        return _do_split(state, self, self.stage_id, self.iter_id, self.lengths,
                         self.inner_to_outer)

    def apply_to_schedule(self, ctx: Any) -> None:
        _te_split(ctx, self.stage_id, self.iter_id, self.lengths, self.inner_to_outer)

    def python(self, p: Any) -> None:
        p.split(self.stage_id, self.iter_id, self.lengths, self.inner_to_outer)


def _follow_lengths(state: State, src_step_id: int, n_split: int) -> tuple:
    src = state.transform_steps[src_step_id]
    if not isinstance(src, SplitStep):
        raise _err(f"follow_split: step {src_step_id} is not a split")
    ls = list(src.lengths)
    if n_split > len(ls):
        raise _err(f"follow_split: n_split {n_split} exceeds the source's {len(ls)} lengths")
    out = ls[:n_split - 1]
    rest = ls[n_split - 1:]
    out.append(None if any(x is None for x in rest) else math.prod(rest))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class FollowSplitStep:
    stage_id: int
    iter_id: int
    src_step_id: int
    n_split: int

    def encode(self) -> list:
        return ["FSP", self.stage_id, self.iter_id, self.src_step_id, self.n_split]

    @staticmethod
    def decode(r: list) -> FollowSplitStep:
        return FollowSplitStep(r[1], r[2], r[3], r[4])

    def lengths(self, state: State) -> tuple:
        return _follow_lengths(state, self.src_step_id, self.n_split)

    def apply_to_state(self, state: State) -> State:
        return _do_split(state, self, self.stage_id, self.iter_id, self.lengths(state), True)

    def apply_to_schedule(self, ctx: Any) -> None:
        _te_split(ctx, self.stage_id, self.iter_id, self.lengths(ctx.state), True)

    def python(self, p: Any) -> None:
        p.split(self.stage_id, self.iter_id, self.lengths(p.state), True)


@dataclass(frozen=True, slots=True)
class FollowFusedSplitStep:
    stage_id: int
    iter_id: int
    src_step_ids: tuple
    level: int
    factor_or_nparts: bool

    def encode(self) -> list:
        return ["FFSP", self.stage_id, self.iter_id, list(self.src_step_ids), self.level,
                int(self.factor_or_nparts)]

    @staticmethod
    def decode(r: list) -> FollowFusedSplitStep:
        return FollowFusedSplitStep(r[1], r[2], tuple(r[3]), r[4], bool(r[5]))

    def lengths(self, state: State) -> tuple:
        prod: int | None = 1
        for sid in self.src_step_ids:
            src = state.transform_steps[sid]
            v = src.lengths[self.level] if self.level < len(src.lengths) else None
            prod = None if v is None or prod is None else prod * v
        return (prod,)

    def apply_to_state(self, state: State) -> State:
        return _do_split(state, self, self.stage_id, self.iter_id, self.lengths(state),
                         self.factor_or_nparts)

    def apply_to_schedule(self, ctx: Any) -> None:
        _te_split(ctx, self.stage_id, self.iter_id, self.lengths(ctx.state),
                  self.factor_or_nparts)

    def python(self, p: Any) -> None:
        p.split(self.stage_id, self.iter_id, self.lengths(p.state), self.factor_or_nparts)


@dataclass(frozen=True, slots=True)
class ReorderStep:
    stage_id: int
    after_ids: tuple

    def encode(self) -> list:
        return ["RE", self.stage_id, list(self.after_ids)]

    @staticmethod
    def decode(r: list) -> ReorderStep:
        return ReorderStep(r[1], tuple(r[2]))

    def apply_to_state(self, state: State) -> State:
        st = state.stages[self.stage_id]
        if sorted(self.after_ids) != list(range(len(st.iters))):
            raise _err(f"reorder of stage {st.op_name}: {list(self.after_ids)} is not a "
                       f"permutation of its {len(st.iters)} iterators")
        iters = tuple(st.iters[i] for i in self.after_ids)
        mapping = {old: new for new, old in enumerate(self.after_ids)}
        return _with_iters(state, self, self.stage_id, st, iters, mapping)

    def apply_to_schedule(self, ctx: Any) -> None:
        tst, leaves = _te_leaves(ctx, self.stage_id, self.after_ids)
        tst.reorder(*leaves)

    def python(self, p: Any) -> None:
        p.reorder(self.stage_id, self.after_ids)


@dataclass(frozen=True, slots=True)
class FuseStep:
    stage_id: int
    fused_ids: tuple

    def encode(self) -> list:
        return ["FU", self.stage_id, list(self.fused_ids)]

    @staticmethod
    def decode(r: list) -> FuseStep:
        return FuseStep(r[1], tuple(r[2]))

    def apply_to_state(self, state: State) -> State:
        st = state.stages[self.stage_id]
        ids = list(self.fused_ids)
        if not ids:
            raise _err("fuse needs at least one iterator")
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise _err(f"fuse of stage {st.op_name}: iterators {ids} are not consecutive")
        parts = [st.iters[i] for i in ids]
        kinds = {p.iter_kind for p in parts}
        if len(ids) > 1 and REDUCTION in kinds and kinds != {REDUCTION}:
            raise _err(f"fuse of stage {st.op_name}: cannot fuse spatial and reduction "
                       f"iterators")
        ext: int | None = 1
        for p in parts:
            ext = None if ext is None or p.range is None else ext * p.range
        kind = kinds.pop() if len(kinds) == 1 else MIXED
        name = "".join(f"{p.name}@" for p in parts) if len(parts) > 1 else parts[0].name
        new = Iterator(name, ext, kind, ANN_NONE)
        iters = st.iters[:ids[0]] + (new,) + st.iters[ids[-1] + 1:]
        n = len(ids) - 1
        mapping = {}
        for i in range(len(st.iters)):
            mapping[i] = i if i < ids[0] else (ids[0] if i <= ids[-1] else i - n)
        return _with_iters(state, self, self.stage_id, st, iters, mapping)

    def apply_to_schedule(self, ctx: Any) -> None:
        tst, leaves = _te_leaves(ctx, self.stage_id, self.fused_ids)
        tst.fuse(*leaves)

    def python(self, p: Any) -> None:
        p.fuse(self.stage_id, self.fused_ids)
