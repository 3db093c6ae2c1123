"""Transform steps: each updates a :class:`State`, replays onto a te schedule, encodes to the
v0.6 record JSON and prints as Python schedule code.

Placement steps (compute_at / inline / root) are applied to the te schedule *after* all loop
steps, from the final state's attach map: later fuses and splits of the target stage move the
attach point in the state (as Ansor's attach map does) and te only sees the final leaf.
The steps live in :mod:`.steps_loop`, :mod:`.steps_annotation` and :mod:`.steps_stage`; this
module is the registry.
"""

from __future__ import annotations

from typing import Any

from .loop_state import REDUCTION, SPATIAL
from .steps_annotation import AnnotationStep, PragmaStep, StorageAlignStep
from .steps_loop import (
    FollowFusedSplitStep,
    FollowSplitStep,
    FuseStep,
    ReorderStep,
    SplitStep,
)
from .steps_stage import (
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    ComputeRootStep,
    RfactorStep,
)

STEP_TYPES: dict[str, Any] = {
    "SP": SplitStep, "FSP": FollowSplitStep, "FFSP": FollowFusedSplitStep, "RE": ReorderStep,
    "FU": FuseStep, "AN": AnnotationStep, "PR": PragmaStep, "SA": StorageAlignStep,
    "CA": ComputeAtStep, "CI": ComputeInlineStep, "CR": ComputeRootStep,
    "CHR": CacheReadStep, "CHW": CacheWriteStep, "RF": RfactorStep,
}

STAGE_CHANGING = (CacheReadStep, CacheWriteStep, RfactorStep)


# Positions of a step record that hold a string; every other field is an integer or a list of
# integers (checked on decode: the printer writes them into Python code).
_STRING_FIELDS = {"PR": (3,), "CHR": (2,), "CHW": (2,)}


def _ints_only(x: Any) -> bool:
    if isinstance(x, list):
        return all(_ints_only(v) for v in x)
    return isinstance(x, int) and not isinstance(x, bool)


def decode_step(r: list) -> Any:
    """A step from its record JSON array; raises ``ValueError`` for a malformed one and
    ``ScheduleError`` for an unknown pragma or cache scope name."""
    if not isinstance(r, list) or not r or not isinstance(r[0], str):
        raise ValueError(f"malformed transform step record {str(r)[:80]}")
    cls = STEP_TYPES.get(r[0])
    if cls is None:
        raise ValueError(f"unknown transform step record {str(r)[:80]}")
    strings = _STRING_FIELDS.get(r[0], ())
    for k, x in enumerate(r[1:], 1):
        if k in strings:
            if not isinstance(x, str):
                raise ValueError(f"step {r[0]}: field {k} must be a string, got {str(x)[:40]}")
        elif not _ints_only(x):
            raise ValueError(f"step {r[0]}: field {k} must be integers, got {str(x)[:40]}")
    return cls.decode(r)


__all__ = [
    "STEP_TYPES", "STAGE_CHANGING", "decode_step", "SPATIAL", "REDUCTION", "AnnotationStep",
    "CacheReadStep", "CacheWriteStep", "ComputeAtStep", "ComputeInlineStep", "ComputeRootStep",
    "FollowFusedSplitStep", "FollowSplitStep", "FuseStep", "PragmaStep", "ReorderStep",
    "RfactorStep", "SplitStep", "StorageAlignStep",
]
