"""Stage groups (TVM's ``Schedule.create_group``): the stages between some inputs and outputs,
moved as one unit by ``compute_at`` / ``compute_root`` / ``compute_inline``.

A member attached to another member keeps that attachment; the others ("at the group root")
follow the group, which is how TVM places a group's root stages at the group's attach point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from templtune.errors import ScheduleError
from templtune.te.expr import IterVar

if TYPE_CHECKING:
    from templtune.schedule.stage import Stage

__all__ = ["StageGroup"]


class StageGroup:
    """A group of stages (``s.create_group(outputs, inputs)``).

    Attributes
    ----------
    members : list of Stage
        Producers first.
    attach_type, attach_stage, attach_ivar
        Where the group is computed, as for a stage.
    """

    def __init__(self, members: list[Stage]) -> None:
        self.members = members
        self.attach_type = "root"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        for m in members:
            m.group = self

    @property
    def num_child_stages(self) -> int:
        return len(self.members)

    def _roots(self) -> list[Stage]:
        inside = {id(m) for m in self.members}
        return [m for m in self.members
                if not (m.attach_type == "scope" and id(m.attach_stage) in inside)]

    def compute_at(self, parent: Stage, iv: Any) -> None:
        """Compute the group inside loop ``iv`` of ``parent`` (a consumer of the group)."""
        if any(parent is m for m in self.members):
            raise ScheduleError(f"cannot compute_at a group inside its member {parent.op.name}")
        for m in self._roots():
            m.compute_at(parent, iv)
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, iv

    def compute_root(self) -> None:
        for m in self._roots():
            m.compute_root()
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    def compute_inline(self) -> None:
        """Inline every member (each must be an inlinable, non-output compute stage)."""
        for m in self.members:
            m.compute_inline()
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def __repr__(self) -> str:
        return f"group({', '.join(m.op.name for m in self.members)})"
