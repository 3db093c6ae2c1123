"""Placement steps (compute_at / inline / root) and stage-inserting steps (cache_read,
cache_write, rfactor). See :mod:`templtune.auto_scheduler.transform_step`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .loop_state import (
    ANN_NONE,
    INLINED,
    ITER,
    REDUCTION,
    ROOT,
    Iterator,
    State,
    replace_stage,
    with_step,
)
from .steps_loop import _err


def _placement(state: State, sid: int, kind: int, step: Any,
               target: tuple[int, int] | None = None) -> State:
    st = state.stages[sid]
    if st.op_type == 0:
        raise _err(f"cannot change the compute location of placeholder {st.op_name}")
    am = tuple(x for x in state.attach_map if x[0] != sid)
    if target is not None:
        am = tuple(sorted(am + ((sid, target[0], target[1]),)))
    # NOTE: Ansor marks the extents unknown until bound inference; templtune keeps the loop
    # extents the steps gave (exact for tiled producers) so that annotation rules can use them,
    # and ``ComputeDAG.infer_bound_from_state`` fills in the inferred ones.
    return with_step(state, step, attach_map=am, stages=replace_stage(
        state, sid, dataclasses.replace(st, compute_at=kind)))


@dataclass(frozen=True, slots=True)
class ComputeAtStep:
    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def encode(self) -> list:
        return ["CA", self.stage_id, self.target_stage_id, self.target_iter_id]

    @staticmethod
    def decode(r: list) -> ComputeAtStep:
        return ComputeAtStep(r[1], r[2], r[3])

    def apply_to_state(self, state: State) -> State:
        return _placement(state, self.stage_id, ITER, self,
                          (self.target_stage_id, self.target_iter_id))

    def apply_to_schedule(self, ctx: Any) -> None:
        pass  # NOTE: applied from the final attach map (module docstring)

    def python(self, p: Any) -> None:
        p.compute_at(self.stage_id, self.target_stage_id, self.target_iter_id)


@dataclass(frozen=True, slots=True)
class ComputeInlineStep:
    stage_id: int

    def encode(self) -> list:
        return ["CI", self.stage_id]

    @staticmethod
    def decode(r: list) -> ComputeInlineStep:
        return ComputeInlineStep(r[1])

    def apply_to_state(self, state: State) -> State:
        return _placement(state, self.stage_id, INLINED, self)

    def apply_to_schedule(self, ctx: Any) -> None:
        pass

    def python(self, p: Any) -> None:
        p.line(f"s[{p.stage_var(self.stage_id)}].compute_inline()")


@dataclass(frozen=True, slots=True)
class ComputeRootStep:
    stage_id: int

    def encode(self) -> list:
        return ["CR", self.stage_id]

    @staticmethod
    def decode(r: list) -> ComputeRootStep:
        return ComputeRootStep(r[1])

    def apply_to_state(self, state: State) -> State:
        return _placement(state, self.stage_id, ROOT, self)

    def apply_to_schedule(self, ctx: Any) -> None:
        pass

    def python(self, p: Any) -> None:
        p.line(f"s[{p.stage_var(self.stage_id)}].compute_root()")


def _shift_attach(state: State, at: int) -> tuple:
    """Stage ids >= ``at`` move up by one (a stage was inserted at ``at``)."""
    def f(x: int) -> int:
        return x + 1 if x >= at else x
    return tuple(sorted((f(s), f(t), i) for s, t, i in state.attach_map))


def _restructure(state: State, step: Any, insert_at: int, fresh: tuple[int, ...]) -> State:
    """Apply a stage-inserting step: replay the structure, insert the new stage at
    ``insert_at`` and refresh the iterators of stages ``fresh`` (new ids) from te leaves."""
    from .replay import structure_of

    new_steps = state.transform_steps + (step,)
    struct = structure_of(state.struct.dag, new_steps)
    stages = list(state.stages)
    stages.insert(insert_at, None)  # type: ignore[arg-type]
    for k in fresh:
        stages[k] = struct.fresh_stage(k, stages[k])
    return dataclasses.replace(state, stages=tuple(stages), transform_steps=new_steps,
                               attach_map=_shift_attach(state, insert_at), struct=struct)


#: Storage scopes a cache stage may use; any other name is rejected (on decode too), so no log
#: can smuggle text into printed schedules.
KNOWN_SCOPES = ("global", "shared", "warp", "local")


def _check_scope(scope: Any) -> None:
    if not isinstance(scope, str) or scope not in KNOWN_SCOPES:
        shown = scope[:64] if isinstance(scope, str) else scope
        raise _err(f"unknown cache scope {shown!r} (known: {', '.join(KNOWN_SCOPES)})")


@dataclass(frozen=True, slots=True)
class CacheReadStep:
    stage_id: int
    scope_name: str
    reader_stage_ids: tuple

    def __post_init__(self) -> None:
        _check_scope(self.scope_name)

    def encode(self) -> list:
        return ["CHR", self.stage_id, self.scope_name, list(self.reader_stage_ids)]

    @staticmethod
    def decode(r: list) -> CacheReadStep:
        return CacheReadStep(r[1], r[2], tuple(r[3]))

    def apply_to_state(self, state: State) -> State:
        return _restructure(state, self, self.stage_id + 1, (self.stage_id + 1,))

    def apply_to_schedule(self, ctx: Any) -> None:
        st = ctx.sch.stages[self.stage_id]
        readers = [ctx.sch.stages[r].op for r in self.reader_stage_ids]
        ctx.sch.cache_read(st.op.output(0), self.scope_name, readers)

    def python(self, p: Any) -> None:
        p.cache_read(self)


@dataclass(frozen=True, slots=True)
class CacheWriteStep:
    stage_id: int
    scope_name: str

    def __post_init__(self) -> None:
        _check_scope(self.scope_name)

    def encode(self) -> list:
        return ["CHW", self.stage_id, self.scope_name]

    @staticmethod
    def decode(r: list) -> CacheWriteStep:
        return CacheWriteStep(r[1], r[2])

    def apply_to_state(self, state: State) -> State:
        return _restructure(state, self, self.stage_id, (self.stage_id, self.stage_id + 1))

    def apply_to_schedule(self, ctx: Any) -> None:
        st = ctx.sch.stages[self.stage_id]
        ctx.sch.cache_write(st.op.output(0), self.scope_name)

    def python(self, p: Any) -> None:
        p.cache_write(self)


@dataclass(frozen=True, slots=True)
class RfactorStep:
    stage_id: int
    iter_id: int
    factor_iter_id: int

    def encode(self) -> list:
        return ["RF", self.stage_id, self.iter_id, self.factor_iter_id]

    @staticmethod
    def decode(r: list) -> RfactorStep:
        return RfactorStep(r[1], r[2], r[3])

    def apply_to_state(self, state: State) -> State:
        old = state.stages[self.stage_id]
        out = _restructure(state, self, self.stage_id, (self.stage_id,))
        # NOTE: te keeps the spatial leaves of the original stage and appends the new reduce
        # axis; mirror that instead of resetting them.
        k = self.stage_id + 1
        te_leaves = out.struct.leaf_names(k)
        spatial = tuple(it for it in old.iters if it.iter_kind != REDUCTION)
        rv = Iterator(te_leaves[-1], out.struct.leaf_extents(k)[-1], REDUCTION, ANN_NONE)
        new = dataclasses.replace(old, op_name=out.struct.op_name(k), iters=spatial + (rv,))
        return dataclasses.replace(out, stages=replace_stage(out, k, new))

    def apply_to_schedule(self, ctx: Any) -> None:
        st = ctx.sch.stages[self.stage_id]
        leaf = st.leaf_iter_vars[self.iter_id]
        ctx.sch.rfactor(st.op.output(0), leaf, self.factor_iter_id)

    def python(self, p: Any) -> None:
        p.rfactor(self)
