"""Annotation steps: annotate (unroll / vectorize / parallel / bind), pragma, storage align."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from templtune.errors import ScheduleError

from .loop_state import ANN_NONE, ANNOTATION_NAMES, State, replace_stage, with_step


@dataclass(frozen=True, slots=True)
class AnnotationStep:
    """Mark iterator ``iter_id`` of stage ``stage_id`` with ``annotation`` (a code of
    :data:`~.loop_state.ANNOTATION_NAMES`: unroll, vectorize, parallel or a thread axis)."""

    stage_id: int
    iter_id: int
    annotation: int

    def encode(self) -> list:
        return ["AN", self.stage_id, self.iter_id, self.annotation]

    @staticmethod
    def decode(r: list) -> AnnotationStep:
        return AnnotationStep(r[1], r[2], r[3])

    def apply_to_state(self, state: State) -> State:
        st = state.stages[self.stage_id]
        it = st.iters[self.iter_id]
        if it.annotation != ANN_NONE:
            raise ScheduleError(f"stage {st.op_name}: iterator {it.name} is already annotated")
        iters = list(st.iters)
        iters[self.iter_id] = dataclasses.replace(it, annotation=self.annotation)
        return with_step(state, self, stages=replace_stage(
            state, self.stage_id, dataclasses.replace(st, iters=tuple(iters))))

    def apply_to_schedule(self, ctx: Any) -> None:
        from templtune import te

        tst = ctx.sch.stages[self.stage_id]
        leaf = tst.leaf_iter_vars[self.iter_id]
        name = ANNOTATION_NAMES[self.annotation]
        if name == "unroll":
            tst.unroll(leaf)
        elif name == "vectorize":
            tst.vectorize(leaf)
        elif name == "parallel":
            tst.parallel(leaf)
        elif name == "tensorize":
            raise ScheduleError("tensorize annotations are not supported")
        elif name:
            if name.startswith("threadIdx"):
                # NOTE: TVM binds a reduce axis to a thread directly (cross-thread reduction,
                # lowered to an all-reduce by the CUDA backend); templtune's schedule asks
                # for the opt-in flag that rfactor otherwise sets.
                tst.allow_reduce_bind = True
            tst.bind(leaf, te.thread_axis(name))

    def python(self, p: Any) -> None:
        p.annotate(self.stage_id, self.iter_id, self.annotation)


#: Pragma names a PragmaStep may carry (what the lowering understands); a record with any other
#: name is rejected on decode, so no log can smuggle text into printed schedules.
KNOWN_PRAGMAS = ("auto_unroll_max_step", "unroll_explicit")


@dataclass(frozen=True, slots=True)
class PragmaStep:
    """``pragma_type`` is ``name`` or ``name$value`` with ``name`` in :data:`KNOWN_PRAGMAS`
    and ``value`` a decimal integer."""

    stage_id: int
    iter_id: int
    pragma_type: str

    def __post_init__(self) -> None:
        if not isinstance(self.pragma_type, str):
            raise ScheduleError(f"pragma type must be a string, got {self.pragma_type!r}")
        name, sep, val = self.pragma_type.partition("$")
        if name not in KNOWN_PRAGMAS:
            raise ScheduleError(f"unknown pragma {name[:64]!r} (known: "
                                f"{', '.join(KNOWN_PRAGMAS)})")
        if sep and not (val.isascii() and val.isdigit() and len(val) <= 18):
            raise ScheduleError(f"pragma {name!r} needs a decimal integer value, got "
                                f"{val[:64]!r}")

    def encode(self) -> list:
        return ["PR", self.stage_id, self.iter_id, self.pragma_type]

    @staticmethod
    def decode(r: list) -> PragmaStep:
        return PragmaStep(r[1], r[2], r[3])

    def _split(self) -> tuple[str, int]:
        name, _, val = self.pragma_type.partition("$")
        return name, int(val) if val else 1

    def apply_to_state(self, state: State) -> State:
        st = state.stages[self.stage_id]
        name, val = self._split()
        if name == "auto_unroll_max_step":
            st = dataclasses.replace(st, auto_unroll_max_step=val)
        return with_step(state, self, stages=replace_stage(state, self.stage_id, st))

    def apply_to_schedule(self, ctx: Any) -> None:
        tst = ctx.sch.stages[self.stage_id]
        leaf = tst.leaf_iter_vars[self.iter_id]
        name, val = self._split()
        tst.pragma(leaf, name, val)
        if name == "auto_unroll_max_step":
            tst.pragma(leaf, "unroll_explicit", int(ctx.is_gpu))

    def python(self, p: Any) -> None:
        name, val = self._split()
        p.pragma(self.stage_id, self.iter_id, name, val)


@dataclass(frozen=True, slots=True)
class StorageAlignStep:
    """Align the storage of stage ``stage_id`` at its axis ``iter_id``: ``factor`` and
    ``offset`` as te's ``storage_align``."""

    stage_id: int
    iter_id: int
    factor: int
    offset: int

    def encode(self) -> list:
        return ["SA", self.stage_id, self.iter_id, self.factor, self.offset]

    @staticmethod
    def decode(r: list) -> StorageAlignStep:
        return StorageAlignStep(r[1], r[2], r[3], r[4])

    def apply_to_state(self, state: State) -> State:
        return with_step(state, self)

    def apply_to_schedule(self, ctx: Any) -> None:
        tst = ctx.sch.stages[self.stage_id]
        axis = tst.op.axis[self.iter_id]
        tst.storage_align(axis, self.factor, self.offset)

    def python(self, p: Any) -> None:
        p.storage_align(self.stage_id, self.iter_id, self.factor, self.offset)
