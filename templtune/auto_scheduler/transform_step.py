"""Transform steps: each updates a :class:`State`, replays onto a te schedule, encodes to the
v0.6 record JSON and prints as Python schedule code.

Placement steps (compute_at / inline / root) are applied to the te schedule *after* all loop
steps, from the final state's attach map: later fuses and splits of the target stage move the
attach point in the state (as Ansor's attach map does) and te only sees the final leaf.
The steps live in :mod:`.steps_loop` and :mod:`.steps_stage`; this module is the registry.
"""

from __future__ import annotations

from typing import Any

from .loop_state import REDUCTION, SPATIAL
from .steps_loop import (
    AnnotationStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    SplitStep,
    StorageAlignStep,
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


def decode_step(r: list) -> Any:
    """A step from its record JSON array."""
    cls = STEP_TYPES.get(r[0]) if r else None
    if cls is None:
        raise ValueError(f"unknown transform step record {r!r}")
    return cls.decode(r)


__all__ = [
    "STEP_TYPES", "STAGE_CHANGING", "decode_step", "SPATIAL", "REDUCTION", "AnnotationStep",
    "CacheReadStep", "CacheWriteStep", "ComputeAtStep", "ComputeInlineStep", "ComputeRootStep",
    "FollowFusedSplitStep", "FollowSplitStep", "FuseStep", "PragmaStep", "ReorderStep",
    "RfactorStep", "SplitStep", "StorageAlignStep",
]
