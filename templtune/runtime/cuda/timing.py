"""The time-evaluator loop shared by every CUDA backend (TVM's number/repeat/min_repeat_ms)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class TimeResult:
    """Seconds per call, one entry per repeat."""

    results: tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.results))

    @property
    def median(self) -> float:
        return float(np.median(self.results))

    @property
    def std(self) -> float:
        return float(np.std(self.results))


def measure_loop(run_batch: Callable[[int], float], number: int = 10, repeat: int = 1,
                 min_repeat_ms: float = 0) -> TimeResult:
    """Time ``run_batch(n)`` (seconds for ``n`` back-to-back calls).

    One untimed warm-up call; then per repeat, ``number`` calls are timed, and while that took
    less than ``min_repeat_ms`` ``number`` grows to ``max(min_repeat_ms / per_call + 1,
    1.618 * number)`` (at most 100 zero-duration retries). The grown ``number`` carries over to
    later repeats. Each result is duration / number.
    """
    if number < 1 or repeat < 1:
        raise ValueError(f"number and repeat must be >= 1, got {number}, {repeat}")
    run_batch(1)
    results = []
    for _ in range(repeat):
        zeros = 0
        while True:
            dur = run_batch(number)
            if min_repeat_ms <= 0 or dur * 1e3 >= min_repeat_ms:
                break
            if dur <= 0:
                zeros += 1
                if zeros >= 100:
                    break
                number = int(number * 1.618) + 1
                continue
            per_call_ms = dur * 1e3 / number
            number = int(max(min_repeat_ms / per_call_ms + 1, number * 1.618))
        results.append(dur / number)
    return TimeResult(tuple(results))
