"""Test doubles: measure every tuner deterministically and fast, without compiling anything.

``measure_option(builder=FakeBuilder(n_parallel=8), runner=FakeRunner(seed=0))`` gives costs that are
a seeded function of the config index; :class:`ReplayRunner` replays costs from a recorded log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .measure import (
    Builder,
    BuildResult,
    Measurable,
    MeasureErrorNo,
    MeasureResult,
    Runner,
    error_result,
)


class FakeBuilder(Builder):
    """A builder that builds nothing and always succeeds (instantly).

    Parameters
    ----------
    n_parallel : int
        Batch size the tuner will use.
    """

    def __init__(self, n_parallel: int = 4, timeout: float = 10) -> None:
        super().__init__(timeout=timeout, n_parallel=n_parallel)

    def build(self, measure_inputs: Sequence[Measurable], verbose: int = 0) -> list[BuildResult]:
        return [BuildResult(None, MeasureErrorNo.NO_ERROR, "", 0.0) for _ in measure_inputs]


def seeded_cost(seed: int) -> Callable[[int], float]:
    """A deterministic cost function of the config index: ``cost(i)`` in (1e-4, 1e-3] seconds."""

    def cost(index: int) -> float:
        u = np.random.default_rng([int(seed), int(index)]).random()
        return 1e-4 + 9e-4 * (1.0 - u)

    return cost


class _IndexRunner(Runner):
    """Base of the fake runners: records each config index in ``measured``, passes build
    errors through and asks :meth:`_result` for the rest."""

    measured: list[int]

    def run(self, measure_inputs: Sequence[Any], build_results: Sequence[BuildResult],
            verbose: int = 0) -> list[MeasureResult]:
        out = []
        for inp, br in zip(measure_inputs, build_results):
            idx = int(inp.config.index)  # NOTE: AutoTVM inputs (the doubles index configs)
            self.measured.append(idx)
            now = time.time()
            if not br.ok:
                out.append(error_result(br.error_no, br.error_detail, br.time_cost, now))
            else:
                out.append(self._result(idx, now))
        return out

    def _result(self, idx: int, now: float) -> MeasureResult:
        raise NotImplementedError


class FakeRunner(_IndexRunner):
    """A runner whose costs are a seeded function of the config index.

    Parameters
    ----------
    cost_fn : callable(int) -> float, optional
        Seconds for a config index; default :func:`seeded_cost` of ``seed``.
    seed : int
        Seed of the default cost function.
    error_fn : callable(int) -> MeasureErrorNo or None, optional
        Error code for a config index (``None``/0 means success), to exercise error paths.

    Attributes
    ----------
    measured : list of int
        Config indices in measurement order (tests use it to check for repeats).
    """

    def __init__(self, cost_fn: Callable[[int], float] | None = None, seed: int = 0,
                 error_fn: Callable[[int], Any] | None = None) -> None:
        super().__init__(timeout=10, n_parallel=1)
        self.cost_fn = cost_fn or seeded_cost(seed)
        self.error_fn = error_fn
        self.measured: list[int] = []

    def _result(self, idx: int, now: float) -> MeasureResult:
        err = self.error_fn(idx) if self.error_fn is not None else None
        if err:
            return error_result(err, f"fake error for config {idx}", 0.0, now)
        cost = float(self.cost_fn(idx))
        return MeasureResult((cost,), MeasureErrorNo.NO_ERROR, cost, now)


class ReplayRunner(_IndexRunner):
    """A runner that replays results recorded in a log (or a list of records).

    Parameters
    ----------
    records : iterable of (autotvm MeasureInput, MeasureResult)
        The recorded measurements; looked up by config index (last record wins).
        ``templtune.autotvm.measure.ReplayRunner`` also takes a log path.
    missing : MeasureErrorNo
        Error code returned for a config not in the records.
    """

    def __init__(self, records: Iterable[tuple[Any, MeasureResult]],
                 missing: MeasureErrorNo = MeasureErrorNo.UNKNOWN_ERROR) -> None:
        super().__init__(timeout=10, n_parallel=1)
        if isinstance(records, str):
            raise TypeError("ReplayRunner takes records; use templtune.autotvm.measure."
                            "ReplayRunner to replay a log file")
        self.table: dict[int, MeasureResult] = {int(inp.config.index): res for inp, res in records}
        self.missing = missing
        self.measured: list[int] = []

    def _result(self, idx: int, now: float) -> MeasureResult:
        if idx in self.table:
            old = self.table[idx]
            return MeasureResult(old.costs, old.error_no, old.all_cost, now, old.error_detail)
        return error_result(self.missing, f"config {idx} not in the replay log", 0.0, now)
