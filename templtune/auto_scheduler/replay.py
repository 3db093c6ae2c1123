"""Replay a state's steps onto a te schedule (for building, bound inference and analysis)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from templtune.te.expr import IterKind

from .access import StageAccess, analyze
from .loop_state import INLINED, ITER, REDUCTION, SPATIAL, Iterator, Stage, State


def _ext(iv: Any) -> int | None:
    e = iv.dom.extent if iv.dom is not None else None
    v = getattr(e, "value", None)
    return int(v) if v is not None else None


@dataclass
class ReplayCtx:
    sch: Any
    state: State
    is_gpu: bool = False


@dataclass(eq=False)
class Structure:
    """Stage structure of a step prefix: the te schedule (loop steps only) and its access
    analysis. Shared by all states with the same stage-changing step prefix."""

    dag: Any
    sch: Any
    access: list[StageAccess] = field(default_factory=list)

    def leaf_names(self, k: int) -> list[str]:
        return [lv.var.name for lv in self.sch.stages[k].leaf_iter_vars]

    def leaf_extents(self, k: int) -> list[int | None]:
        return [_ext(lv) for lv in self.sch.stages[k].leaf_iter_vars]

    def op_name(self, k: int) -> str:
        return self.sch.stages[k].op.name

    def fresh_stage(self, k: int, old: Stage | None) -> Stage:
        tst = self.sch.stages[k]
        iters = tuple(Iterator(lv.var.name, _ext(lv),
                               REDUCTION if lv.iter_type is IterKind.REDUCE else SPATIAL)
                      for lv in tst.leaf_iter_vars)
        op_type = 0 if tst.is_placeholder else 1
        if old is None:
            return Stage(tst.op.name, op_type, iters)
        return Stage(tst.op.name, op_type, iters, old.compute_at, old.auto_unroll_max_step)


def _apply_loop_steps(ctx: ReplayCtx, steps: Any) -> None:
    for step in steps:
        step.apply_to_schedule(ctx)


def structure_of(dag: Any, steps: tuple) -> Structure:
    """Replay ``steps`` structurally (undefined lengths as 1, no placement).

    Cached per DAG by the encoded steps: the search replays the same stage-inserting prefix
    (e.g. a sketch's cache_write) for every candidate.
    """
    cache = getattr(dag, "_struct_cache", None)
    if cache is None:
        return _structure_of(dag, steps)
    key = json.dumps([s.encode() for s in steps])
    hit = cache.get(key)
    if hit is None:
        if len(cache) > 512:
            cache.clear()
        hit = cache[key] = _structure_of(dag, steps)
    return hit


def _structure_of(dag: Any, steps: tuple) -> Structure:
    from templtune.te import create_schedule

    from .loop_state import State as _S

    sch = create_schedule([t.op for t in dag.outputs])
    fake = _S((), tuple(steps), (), False, None)
    _apply_loop_steps(ReplayCtx(sch, fake), steps)
    return Structure(dag, sch, analyze(sch))


def replay_schedule(dag: Any, state: State, is_gpu: bool = False,
                    layout_rewrite: int = 0) -> tuple[Any, list[Any]]:
    """A te schedule with all of ``state``'s steps applied, and the argument tensors.

    ``layout_rewrite`` (a LayoutRewriteOption value) other than 0 re-lays the layout-free
    placeholders the state tiles, through a transform stage (see :mod:`.layout_rewrite`)."""
    from templtune.te import create_schedule

    sch = create_schedule([t.op for t in dag.outputs])
    ctx = ReplayCtx(sch, state, is_gpu)
    _apply_loop_steps(ctx, state.transform_steps)
    if len(sch.stages) != len(state.stages):
        raise RuntimeError(f"replay produced {len(sch.stages)} stages, the state has "
                           f"{len(state.stages)}")
    for k, st in enumerate(state.stages):
        tst = sch.stages[k]
        if st.compute_at == INLINED:
            tst.compute_inline()
        elif st.compute_at == ITER:
            att = state.attached_to(k)
            assert att is not None
            target = sch.stages[att[0]]
            tst.compute_at(target, target.leaf_iter_vars[att[1]])
            if is_gpu and tst.scope == "global":
                # NOTE: a stage computed inside a GPU thread loop is private to the thread
                # (TVM infers this scope; templtune's schedule keeps what it is told).
                tst.set_scope("local")
    if layout_rewrite and not is_gpu:
        from templtune.te.tensor import PlaceholderOp

        from .layout_rewrite import REWRITE_FOR_PRE_TRANSFORMED, rewrite_layout

        done = rewrite_layout(dag, sch, layout_rewrite == REWRITE_FOR_PRE_TRANSFORMED)
        swap = {id(t): new for t, new, _ in done if isinstance(new.op, PlaceholderOp)}
        return sch, [swap.get(id(t), t) for t in dag.tensors]
    return sch, list(dag.tensors)
