"""GPU states over the target's per-block limits are not worth a trial.

Random tile sizes and cooperative fetching can ask for more shared memory, threads or
registers per block than the device has (its capability record); the CUDA backend rejects such
a state as an ``INSTANTIATION_ERROR`` after the builder has spent a process on it, and the
search learns nothing from it. The search lowers each GPU candidate once, runs the backend's
own cheap resource check on it, and drops it before measurement (TVM drops such states in its
feature extraction, through VerifyGPUCode).
"""

from __future__ import annotations

import logging
from typing import Any

from templtune.errors import InstantiationError

from .loop_state import State

__all__ = ["GpuLimitFilter", "over_gpu_limits"]

logger = logging.getLogger("auto_scheduler")


def over_gpu_limits(dag: Any, state: State, target: Any) -> str | None:
    """The backend's reason why ``state`` does not fit ``target``'s per-block limits, or None
    when it fits. A state that does not lower is left to the builder to report."""
    from templtune.codegen.cuda.build import limits_from_target, precheck
    from templtune.lower.lower_api import lower

    try:
        sch, args = dag.apply_steps_from_state(state, is_gpu=True)
        func = lower(sch, args, "default_function")
    except Exception:  # noqa: BLE001 - not this check's verdict: the builder reports it
        return None
    try:
        precheck(func, limits_from_target(target))
    except InstantiationError as exc:
        return str(exc)
    return None


class GpuLimitFilter:
    """:func:`over_gpu_limits` with its verdicts kept per state (a search meets the same
    state in many rounds), for one task."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self._verdicts: dict[str, bool] = {}
        self.dropped = 0

    def fits(self, state: State, key: str) -> bool:
        """Whether ``state`` (de-duplication key ``key``) fits the task's target."""
        ok = self._verdicts.get(key)
        if ok is None:
            reason = over_gpu_limits(self.task.compute_dag, state, self.task.target)
            ok = self._verdicts[key] = reason is None
            if not ok:
                self.dropped += 1
                logger.debug("dropped a state over the GPU limits: %s", reason)
        return ok
