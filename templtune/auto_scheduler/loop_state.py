"""Loop state: stages with iterators, plus the transform steps that produced them.

A :class:`State` is immutable; every primitive returns a new state with one more step. The
iterator layout of each stage mirrors the leaf axes of the te schedule that the steps replay to,
so ``iter_id`` in a step is a leaf position on both sides.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# iterator kinds
SPATIAL, REDUCTION, MIXED, SPECIAL = 0, 1, 2, 3
# compute_at kinds
ROOT, INLINED, ITER = 0, 1, 2
# annotation codes (ANNOTATION_TRANS_TABLE order)
ANN_NONE, ANN_UNROLL, ANN_VECTORIZE, ANN_PARALLEL, ANN_VTHREAD = 0, 1, 2, 3, 4
ANN_BLOCK_X, ANN_THREAD_X, ANN_BLOCK_Y, ANN_THREAD_Y = 5, 6, 7, 8
ANN_BLOCK_Z, ANN_THREAD_Z, ANN_TENSORIZE = 9, 10, 11
ANNOTATION_NAMES = ("", "unroll", "vectorize", "parallel", "vthread", "blockIdx.x",
                    "threadIdx.x", "blockIdx.y", "threadIdx.y", "blockIdx.z", "threadIdx.z",
                    "tensorize")
THREAD_ANNOTATIONS = {"vthread": ANN_VTHREAD, "blockIdx.x": ANN_BLOCK_X,
                      "threadIdx.x": ANN_THREAD_X, "blockIdx.y": ANN_BLOCK_Y,
                      "threadIdx.y": ANN_THREAD_Y, "blockIdx.z": ANN_BLOCK_Z,
                      "threadIdx.z": ANN_THREAD_Z}


@dataclass(frozen=True, slots=True)
class Iterator:
    """One loop of a stage: name, extent (None while unknown), kind and annotation."""

    name: str
    range: int | None
    iter_kind: int = SPATIAL
    annotation: int = ANN_NONE

    @property
    def extent(self) -> int | None:
        return self.range


@dataclass(frozen=True, slots=True)
class Stage:
    """One operation's loops in a state (placeholder: op_type 0; compute: 1)."""

    op_name: str
    op_type: int
    iters: tuple[Iterator, ...]
    compute_at: int = ROOT
    auto_unroll_max_step: int = 0


@dataclass(frozen=True, slots=True)
class State:
    """Stages + transform steps + attach map. Build one from ``ComputeDAG.init_state``.

    Every primitive (``split``, ``fuse``, ...) returns a new state; stage arguments may be an
    int index, an operation or a tensor, iterator arguments an int position or an
    :class:`Iterator`.
    """

    stages: tuple[Stage, ...]
    transform_steps: tuple[Any, ...]
    attach_map: tuple[tuple[int, int, int], ...]
    concrete: bool
    struct: Any = field(compare=False, repr=False)

    # ---- lookup -----------------------------------------------------------------------------
    def stage_id(self, x: Any) -> int:
        if isinstance(x, int):
            if not 0 <= x < len(self.stages):
                raise IndexError(f"stage id {x} out of range (0..{len(self.stages) - 1})")
            return x
        name = getattr(x, "name", None) if not isinstance(x, str) else x
        if hasattr(x, "op") and not isinstance(x, str):
            name = x.op.name
        for k, st in enumerate(self.stages):
            if st.op_name == name:
                return k
        raise KeyError(f"no stage named {name!r} in this state")

    def iter_id(self, stage_id: int, it: Any) -> int:
        iters = self.stages[stage_id].iters
        if isinstance(it, int):
            if not 0 <= it < len(iters):
                raise IndexError(f"iterator {it} out of range for stage "
                                 f"{self.stages[stage_id].op_name}")
            return it
        for k, x in enumerate(iters):
            if x is it or x == it:
                return k
        raise KeyError(f"iterator {it!r} is not in stage {self.stages[stage_id].op_name}")

    def attached_to(self, stage_id: int) -> tuple[int, int] | None:
        for s, t, i in self.attach_map:
            if s == stage_id:
                return t, i
        return None

    def attached_stages(self, stage_id: int, iter_id: int | None = None) -> list[int]:
        return [s for s, t, i in self.attach_map
                if t == stage_id and (iter_id is None or i == iter_id)]

    def __getitem__(self, x: Any) -> Stage:
        return self.stages[self.stage_id(x)]

    # ---- primitives (each appends one step) ---------------------------------------------------
    def _add(self, step: Any) -> State:
        return step.apply_to_state(self)

    def split(self, stage: Any, it: Any, lengths: Any, inner_to_outer: bool = True) -> State:
        from .transform_step import SplitStep

        sid = self.stage_id(stage)
        iid = self.iter_id(sid, it)
        ext = self.stages[sid].iters[iid].range
        return self._add(SplitStep(sid, iid, ext, tuple(lengths), bool(inner_to_outer)))

    def follow_split(self, stage: Any, it: Any, src_step_id: int, n_split: int) -> State:
        from .transform_step import FollowSplitStep

        sid = self.stage_id(stage)
        return self._add(FollowSplitStep(sid, self.iter_id(sid, it), src_step_id, n_split))

    def follow_fused_split(self, stage: Any, it: Any, src_step_ids: Any, level: int,
                           factor_or_nparts: bool) -> State:
        from .transform_step import FollowFusedSplitStep

        sid = self.stage_id(stage)
        return self._add(FollowFusedSplitStep(sid, self.iter_id(sid, it), tuple(src_step_ids),
                                              level, bool(factor_or_nparts)))

    def reorder(self, stage: Any, order: Any) -> State:
        from .transform_step import ReorderStep

        sid = self.stage_id(stage)
        return self._add(ReorderStep(sid, tuple(self.iter_id(sid, x) for x in order)))

    def fuse(self, stage: Any, iters: Any) -> State:
        from .transform_step import FuseStep

        sid = self.stage_id(stage)
        return self._add(FuseStep(sid, tuple(self.iter_id(sid, x) for x in iters)))

    def _annotate(self, stage: Any, it: Any, ann: int) -> State:
        from .transform_step import AnnotationStep

        sid = self.stage_id(stage)
        return self._add(AnnotationStep(sid, self.iter_id(sid, it), ann))

    def parallel(self, stage: Any, it: Any) -> State:
        return self._annotate(stage, it, ANN_PARALLEL)

    def vectorize(self, stage: Any, it: Any) -> State:
        return self._annotate(stage, it, ANN_VECTORIZE)

    def unroll(self, stage: Any, it: Any, max_unroll: int | None = None) -> State:
        sid = self.stage_id(stage)
        ext = self.stages[sid].iters[self.iter_id(sid, it)].range
        if max_unroll is not None and ext is not None and ext > max_unroll:
            return self
        return self._annotate(sid, it, ANN_UNROLL)

    def bind(self, stage: Any, it: Any, thread_name: str) -> State:
        if thread_name not in THREAD_ANNOTATIONS:
            raise ValueError(f"invalid thread name {thread_name!r}")
        return self._annotate(stage, it, THREAD_ANNOTATIONS[thread_name])

    def pragma(self, stage: Any, it: Any, pragma_type: str) -> State:
        from .transform_step import PragmaStep

        sid = self.stage_id(stage)
        return self._add(PragmaStep(sid, self.iter_id(sid, it), pragma_type))

    def storage_align(self, stage: Any, it: Any, factor: int, offset: int) -> State:
        from .transform_step import StorageAlignStep

        sid = self.stage_id(stage)
        return self._add(StorageAlignStep(sid, self.iter_id(sid, it), factor, offset))

    def compute_at(self, stage: Any, target_stage: Any, target_iter: Any) -> State:
        from .transform_step import ComputeAtStep

        sid, tid = self.stage_id(stage), self.stage_id(target_stage)
        return self._add(ComputeAtStep(sid, tid, self.iter_id(tid, target_iter)))

    def compute_inline(self, stage: Any) -> State:
        from .transform_step import ComputeInlineStep

        return self._add(ComputeInlineStep(self.stage_id(stage)))

    def compute_root(self, stage: Any) -> State:
        from .transform_step import ComputeRootStep

        return self._add(ComputeRootStep(self.stage_id(stage)))

    def cache_read(self, stage: Any, scope: str, reader_stages: Any) -> State:
        from .transform_step import CacheReadStep

        return self._add(CacheReadStep(self.stage_id(stage), scope,
                                       tuple(self.stage_id(r) for r in reader_stages)))

    def cache_write(self, stage: Any, scope: str) -> State:
        from .transform_step import CacheWriteStep

        return self._add(CacheWriteStep(self.stage_id(stage), scope))

    def rfactor(self, stage: Any, it: Any, factor_iter_id: int) -> State:
        from .transform_step import RfactorStep

        sid = self.stage_id(stage)
        return self._add(RfactorStep(sid, self.iter_id(sid, it), factor_iter_id))

    # ---- text ---------------------------------------------------------------------------------
    def to_str(self, delete_trivial_loop: bool = True) -> str:
        """Canonical loop-nest text (used to de-duplicate states)."""
        lines: list[str] = []
        for k, st in enumerate(self.stages):
            if st.op_type == 0 or st.compute_at != ROOT:
                continue
            self._print_stage(k, 0, lines, delete_trivial_loop)
        return "\n".join(lines) + "\n"

    def _print_stage(self, k: int, indent: int, lines: list[str], trivial: bool) -> None:
        st = self.stages[k]
        if st.compute_at == INLINED:
            return
        for i, it in enumerate(st.iters):
            if not (trivial and it.range == 1 and it.annotation == ANN_NONE):
                ann = ANNOTATION_NAMES[it.annotation] or "for"
                ext = "?" if it.range is None else str(it.range)
                lines.append(f"{'  ' * indent}{ann} {it.name} (0,{ext})")
                indent += 1
            for a in self.attached_stages(k, i):
                self._print_stage(a, indent, lines, trivial)
        lines.append(f"{'  ' * indent}{st.op_name} = ...")

    def __str__(self) -> str:
        return self.to_str()


def replace_stage(state: State, k: int, new: Stage) -> tuple[Stage, ...]:
    return state.stages[:k] + (new,) + state.stages[k + 1:]


def with_step(state: State, step: Any, **changes: Any) -> State:
    return dataclasses.replace(state, transform_steps=state.transform_steps + (step,), **changes)
