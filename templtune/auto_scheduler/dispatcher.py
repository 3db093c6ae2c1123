"""ApplyHistoryBest: the best state per (target kind, workload key) from records."""

from __future__ import annotations

import contextvars
import heapq
import logging
from typing import Any

from .measure_record import (
    CANDIDATES,
    RecordReader,
    check_steps,
    usable_cost,
    workload_distance_factor,
)

logger = logging.getLogger("templtune.auto_scheduler")

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

    Notes
    -----
    Only successful records with finite, positive costs compete. A query that passes the
    task's ``dag`` gets the fastest of the ``CANDIDATES`` fastest records whose steps fit it
    (:func:`~.measure_record.check_steps`); the others are skipped with a warning.
    """

    def __init__(self, records: Any, n_lines: int | None = None,
                 include_compatible: bool = False) -> None:
        self.include_compatible = include_compatible
        self.best: dict[str, dict[str, tuple[Any, float]]] = {}
        # (kind, key) -> heap of (-cost, -seq, state): the CANDIDATES fastest records
        self._candidates: dict[tuple[str, str], list[tuple[float, int, Any]]] = {}
        self._checked: set[tuple[str, str]] = set()
        self._seq = 0
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
            # NOTE: only finite, positive costs of successful records compete (a NaN cost
            # that came first would otherwise never be replaced).
            cost = usable_cost(res)
            if cost is None:
                continue
            kind = str(inp.task.target).split()[0]
            table = self.best.setdefault(kind, {})
            k = inp.task.workload_key
            if k not in table or cost < table[k][1]:
                table[k] = (inp.state, cost)
            self._seq += 1
            heap = self._candidates.setdefault((kind, k), [])
            item = (-cost, -self._seq, inp.state)
            if len(heap) < CANDIDATES:
                heapq.heappush(heap, item)
            elif item[:2] > heap[0][:2]:
                heapq.heapreplace(heap, item)
            self._checked.discard((kind, k))

    def _vet(self, kind: str, workload_key: str, dag: Any) -> None:
        """Replace the best of the key by the fastest candidate whose steps fit ``dag``."""
        ck = (kind, workload_key)
        if ck in self._checked or ck not in self._candidates:
            return
        self._checked.add(ck)
        table = self.best.setdefault(kind, {})
        table.pop(workload_key, None)
        for neg_cost, _, state in sorted(self._candidates[ck], key=lambda c: c[:2],
                                         reverse=True):
            why = check_steps(dag, state.transform_steps)
            if why is None:
                table[workload_key] = (state, -neg_cost)
                return
            logger.warning("ignoring a record of %s: %s", workload_key, why)

    def query(self, target: Any, workload_key: str, dag: Any = None) -> Any:
        """The best record's state (steps) for the workload, or None. With ``dag`` (the
        task's ComputeDAG), only a record whose steps fit it."""
        kind = str(target).split()[0]
        if dag is not None:
            self._vet(kind, workload_key, dag)
        table = self.best.get(kind, {})
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
        kind = str(target).split()[0]
        self.best.setdefault(kind, {})[workload_key] = (state, 1.0)
        self._checked.add((kind, workload_key))  # the caller's choice is not vetted

    def __enter__(self) -> ApplyHistoryBest:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)

    @staticmethod
    def current() -> Any:
        return _CURRENT.get()
