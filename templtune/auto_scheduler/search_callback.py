"""``PreloadCustomSketchRule``: an init-search callback that adds a user sketch rule to a
:class:`SketchPolicy` (TVM's advanced sketch customisation).

The user's rules are tried before the built-in ones, in the order the callbacks are given, so a
rule answering ``APPLY_AND_SKIP_REST`` replaces the built-in rules for the stages it matches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .loop_state import State
from .sketch import Cond, SketchRule

__all__ = ["PreloadCustomSketchRule"]


class PreloadCustomSketchRule:
    """Add the sketch rule ``(meet_condition_func, apply_func)`` to the policy it is given to.

    Parameters
    ----------
    meet_condition_func : callable
        ``(policy, state, stage_id) -> PASS | APPLY | APPLY_AND_SKIP_REST`` (ints 0, 1, 2).
    apply_func : callable
        ``(policy, state, stage_id) -> [[new_state, next_stage_id], ...]``; a next stage id of
        -1 finishes the sketch.
    rule_name : str
    """

    PASS = 0
    APPLY = 1
    APPLY_AND_SKIP_REST = 2

    def __init__(self, meet_condition_func: Callable[[Any, State, int], int],
                 apply_func: Callable[[Any, State, int], Any],
                 rule_name: str = "CustomSketchRule") -> None:
        self.meet_condition_func = meet_condition_func
        self.apply_func = apply_func
        self.rule_name = rule_name

    def _condition(self, policy: Any, state: State, stage_id: int) -> Cond:
        return Cond(int(self.meet_condition_func(policy, state, stage_id)))

    def _apply(self, policy: Any, state: State, stage_id: int) -> list[tuple[State, int]]:
        out = []
        for item in self.apply_func(policy, state, stage_id):
            new_state, next_id = item
            if not isinstance(new_state, State):
                raise TypeError(f"custom sketch rule {self.rule_name!r} returned a "
                                f"{type(new_state).__name__}, not a State")
            out.append((new_state, int(next_id)))
        return out

    def __call__(self, policy: Any) -> None:
        rules = getattr(policy, "custom_sketch_rules", None)
        if rules is None:
            raise TypeError("PreloadCustomSketchRule works only with a SketchPolicy")
        rules.append(SketchRule(self.rule_name, self._condition, self._apply))
        if getattr(policy, "verbose", 0):
            print(f'Custom sketch rule "{self.rule_name}" added.')
