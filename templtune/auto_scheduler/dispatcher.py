"""ApplyHistoryBest: the best state per (target kind, workload key) from records."""

from __future__ import annotations

import contextvars
from typing import Any

from templtune.target import kind_of

from .measure_record import RecordReader, workload_distance_factor

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("auto_scheduler_dispatch",
                                                              default=None)


class ApplyHistoryBest:
    """Query the best record of a workload (also usable as a context manager).

    Parameters
    ----------
    records : str, list of str, or list of (input, result)
    n_lines : int, optional
        Load only the first ``n_lines`` records.
    include_compatible : bool
        Allow records of compatible (divisible-shape) workloads.
    """

    def __init__(self, records: Any, n_lines: int | None = None,
                 include_compatible: bool = False) -> None:
        self.include_compatible = include_compatible
        self.best: dict[str, dict[str, tuple[Any, float]]] = {}
        self._token: Any = None
        self.load(records, n_lines)

    def load(self, records: Any, n_lines: int | None = None) -> None:
        if isinstance(records, str):
            records = [records]
        pairs: list = []
        for r in records:
            if isinstance(r, str):
                pairs += list(RecordReader(r))
            else:
                pairs.append(r)
        if n_lines is not None:
            pairs = pairs[:n_lines]
        for inp, res in pairs:
            if res.error_no != 0:
                continue
            kind = kind_of(inp.task.target)
            table = self.best.setdefault(kind, {})
            cost = res.mean_cost
            k = inp.task.workload_key
            if k not in table or cost < table[k][1]:
                table[k] = (inp.state, cost)

    def query(self, target: Any, workload_key: str) -> Any:
        """The best record's state (steps) for the workload, or None."""
        table = self.best.get(kind_of(target), {}) if target is not None else {}
        hit = table.get(workload_key)
        if hit is not None:
            return hit[0]
        if not self.include_compatible:
            return None
        best, best_cost = None, float("inf")
        for k, (state, cost) in table.items():
            f = workload_distance_factor(workload_key, k)
            if cost * f < best_cost:
                best, best_cost = state, cost * f
        return best

    def update(self, target: Any, workload_key: str, state: Any) -> None:
        self.best.setdefault(kind_of(target), {})[workload_key] = (state, 1.0)

    def __enter__(self) -> ApplyHistoryBest:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)

    @staticmethod
    def current() -> Any:
        return _CURRENT.get()
