"""The results of bound inference: :class:`StageBound` per stage and the :class:`BoundResult`.

Plain data, separate from the passes in :mod:`templtune.schedule.bound` and
:mod:`templtune.schedule.bound_region` so that both (and the lowering, which reads them) share
the types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templtune.schedule.stage import Stage
from templtune.te.expr import IterVar, PrimExpr, Var
from templtune.te.simplify import Simplifier
from templtune.te.tensor import ComputeOp, Tensor


@dataclass(eq=False)
class StageBound:
    """Bound-inference results for one computed (non-inlined) stage."""

    stage: Stage
    op: ComputeOp
    body: tuple[PrimExpr, ...]
    leaves: list[IterVar]
    path: list[tuple[StageBound, IterVar]] = field(default_factory=list)
    # ints, or expressions of shape variables for symbolic shapes
    ext: dict[IterVar, Any] = field(default_factory=dict)
    root_min: dict[IterVar, PrimExpr] = field(default_factory=dict)
    loop_var: dict[IterVar, PrimExpr] = field(default_factory=dict)
    composed: dict[IterVar, PrimExpr] = field(default_factory=dict)
    root_val: dict[IterVar, PrimExpr] = field(default_factory=dict)
    # thread-bound leaves whose thread axis declares a larger extent than the leaf needs
    launch_ext: dict[IterVar, int] = field(default_factory=dict)
    scope: str = "global"

    @property
    def roots(self) -> list[IterVar]:
        return list(self.op.axis) + list(self.op.reduce_axis)

    def full_loops(self) -> list[tuple[StageBound, IterVar]]:
        return self.path + [(self, lv) for lv in self.leaves]

    def thread_of(self, lv: IterVar) -> IterVar | None:
        a = self.stage.iter_var_attrs.get(lv)
        return None if a is None else a.bind_thread


@dataclass(eq=False)
class BoundResult:
    """Per-stage bounds plus the constant ranges of every loop variable."""

    infos: dict[Stage, StageBound]
    order: list[StageBound]
    var_ranges: dict[Var, tuple[int, int]]
    inlined: dict[Tensor, tuple[ComputeOp, int]]

    def simplifier(self) -> Simplifier:
        return Simplifier(self.var_ranges)
