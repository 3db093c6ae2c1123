"""``ApplyHistoryBest``: the dispatch context that answers from tuning records.

The record tables, the check of a winning config against the queried workload's space, and
the per-thread-count views. :mod:`templtune.autotvm.dispatcher` (and TVM's path
``autotvm.task.dispatcher``) re-export both names.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any

from templtune.autotvm.dispatcher import (
    ApplyConfig,
    ConfigNotFoundError,
    DispatchContext,
    iter_records,
)
from templtune.autotvm.task.target_compat import as_target, target_keys, target_model
from templtune.errors import TargetError

logger = logging.getLogger("autotvm")

__all__ = ["ApplyHistoryBest", "apply_history_best"]


# NOTE: per key, this many of the fastest records are kept as candidates: when the fastest does
# not fit the task's config space (checked at the first query), the next one answers.
_CANDIDATES = 16


class ApplyHistoryBest(DispatchContext):
    """Answer with the best measured config per (target key or model, workload).

    Parameters
    ----------
    records : path, text stream, iterable of (MeasureInput, MeasureResult), or nestings of these
        Tuning records; failed records, and records whose costs are not all finite and positive
        (see :func:`templtune.autotvm.record.usable_cost`), are ignored. The smallest mean cost
        wins; on a tie the first record is kept.
    strict : bool
        Raise :class:`ConfigNotFoundError` on a miss instead of delegating to the fallback.
    include_emulated : bool or None
        Use records timed on the CPU CUDA emulator (``"device": "emulator"``). None (default):
        only when CUDA modules run on the emulator here; on a real GPU they are ignored (their
        timings are CPU timings), with one warning per load.

    Notes
    -----
    At the first query of a (target, workload), the winning record's config is checked against
    the config space of the queried workload (the template is run once in collect mode, on the
    caller's own arguments, never on a log's): a record with a missing knob, a split whose
    factors do not multiply to the axis or a choice the knob does not offer is rejected with a
    warning, and the next-fastest of the ``_CANDIDATES`` fastest records is tried.

    Records that name the thread count they were timed at (``"threads"``, written by
    templtune's runner) also form one view per count. A query answers from the view of the
    thread count the build runs with (the target's ``-num-cores``, else
    ``TEMPLTUNE_NUM_THREADS``, else all cores) when that view holds the workload, else from the
    records that name no count (older logs, TVM's), else from all. templtune deviation: TVM
    ranks every record of a workload together, so a config
    (or an implementation, such as Winograd against the direct conv) that wins on one thread
    but stalls on memory bandwidth at two is also chosen for a two-thread build.
    """

    def __init__(self, records: Any = None, strict: bool = False,
                 include_emulated: bool | None = None) -> None:
        super().__init__()
        self.strict = strict
        self.include_emulated = include_emulated
        self.best_by_targetkey: dict[tuple[str, Any], tuple[Any, Any]] = {}
        self.best_by_model: dict[tuple[str, Any], tuple[Any, Any]] = {}
        self._best_user_defined: dict[tuple[str, Any], Any] = {}
        # thread count -> a context of the records timed at that count (None in such a view)
        self._by_threads: dict[int, ApplyHistoryBest] | None = {}
        # (id of the table, key) -> heap of (-cost, -seq, inp, res): the _CANDIDATES fastest
        # usable records of the key
        self._candidates: dict[tuple[int, Any], list[tuple[float, int, Any, Any]]] = {}
        self._checked: set[tuple[int, Any]] = set()
        # the candidates that fit the queried workload's space, per key (query_candidates)
        self._valid: dict[tuple[int, Any], list[tuple[Any, float]]] = {}
        self._seq = 0
        if records is not None:
            self.load(records)

    def load(self, records: Any) -> None:
        """Merge more records into the tables."""
        from templtune.autotvm.record import usable_records

        n = 0
        for inp, res, cost in usable_records(iter_records(records), self.include_emulated):
            n += 1
            self._add(inp, res, cost)
            if self._by_threads is not None:
                self._threads_view(int(getattr(res, "threads", 0) or 0))._add(inp, res, cost)
        logger.debug("loaded %d usable tuning records", n)

    def _add(self, inp: Any, res: Any, cost: float) -> None:
        wkl = inp.task.workload
        for k in target_keys(inp.target):
            self._offer(self.best_by_targetkey, (k, wkl), cost, inp, res)
        model = target_model(inp.target)
        if model != "unknown":
            self._offer(self.best_by_model, (model, wkl), cost, inp, res)

    def _threads_view(self, threads: int) -> ApplyHistoryBest:
        """The context of the records timed on ``threads`` threads (0: naming no count)."""
        assert self._by_threads is not None
        view = self._by_threads.get(threads)
        if view is None:
            view = self._by_threads[threads] = ApplyHistoryBest()
            view._by_threads = None  # a view has no views
            view._best_user_defined = self._best_user_defined  # update() answers every count
        return view

    def _view(self, target: Any, workload: Any) -> ApplyHistoryBest:
        """The records that answer for ``workload``: those timed at the build's thread count,
        else those that name no count, else all (the first of these that has the workload)."""
        if target is None or not self._by_threads or self._by_threads.keys() <= {0}:
            return self  # no record names a thread count
        from templtune.codegen.llvm.compile import default_num_threads

        for threads in (default_num_threads(as_target(target)), 0):
            view = self._by_threads.get(threads)
            if view is not None and view._cost_records(target, workload) is not None:
                return view
        return self

    def _offer(self, table: dict[tuple[str, Any], tuple[Any, Any]], key: tuple[str, Any],
               cost: float, inp: Any, res: Any) -> None:
        from templtune.autotvm.record import usable_cost

        self._seq += 1
        ckey = (id(table), key)
        heap = self._candidates.setdefault(ckey, [])
        item = (-cost, -self._seq, inp, res)
        if len(heap) < _CANDIDATES:
            heapq.heappush(heap, item)
        elif item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)
        self._checked.discard(ckey)
        self._valid.pop(ckey, None)
        old = table.get(key)
        if old is None or cost < (usable_cost(old[1]) or float("inf")):
            table[key] = (inp, res)

    def _best(self, table: dict[tuple[str, Any], tuple[Any, Any]], key: tuple[str, Any],
              target: Any, workload: Any) -> tuple[Any, Any] | None:
        """The fastest record of ``key`` whose config fits the queried workload's space."""
        ckey = (id(table), key)
        if ckey not in self._checked and ckey in self._candidates:
            self._checked.add(ckey)
            space = _space_of(target, workload)
            if space is not None:
                from templtune.autotvm.record import check_config

                table.pop(key, None)
                for _, _, inp, res in sorted(self._candidates[ckey], key=lambda c: c[:2],
                                             reverse=True):
                    why = check_config(space, inp.config)
                    if why is None:
                        table[key] = (inp, res)
                        break
                    logger.warning("ignoring the record of config #%s for workload %r: %s",
                                   inp.config.index, workload, why)
        return table.get(key)

    def _query_inside(self, target: Any, workload: Any) -> Any:
        return self._view(target, workload)._query_records(target, workload)

    def _cost_inside(self, target: Any, workload: Any) -> float | None:
        return self._view(target, workload)._cost_records(target, workload)

    def _candidates_inside(self, target: Any, workload: Any) -> list[tuple[Any, float]]:
        return self._view(target, workload)._candidates_records(target, workload)

    def _query_records(self, target: Any, workload: Any) -> Any:
        if target is None:
            raise TargetError("ApplyHistoryBest needs a target to look up a config; call the "
                              "template inside `with templtune.target.Target(...)`")
        target = as_target(target)
        key = (target_model(target), workload)
        if key in self._best_user_defined:
            return self._best_user_defined[key]
        hit = self._best(self.best_by_model, key, target, workload)
        if hit is not None:
            return hit[0].config
        for k in target_keys(target):
            key = (k, workload)
            if key in self._best_user_defined:
                return self._best_user_defined[key]
            hit = self._best(self.best_by_targetkey, key, target, workload)
            if hit is not None:
                return hit[0].config
        if self.strict:
            raise ConfigNotFoundError(f"no tuned config for workload {workload!r} on target "
                                      f"'{target}' in the given records (strict mode)")
        return None

    def _cost_records(self, target: Any, workload: Any) -> float | None:
        if target is None:
            return None
        target = as_target(target)
        for k in (target_model(target), *target_keys(target)):
            if (k, workload) in self._best_user_defined:
                return 0.0
            table = self.best_by_model if k == target_model(target) else self.best_by_targetkey
            hit = self._best(table, (k, workload), target, workload)
            if hit is not None:
                return _mean(hit[1].costs)
        return None

    def _candidates_records(self, target: Any, workload: Any) -> list[tuple[Any, float]]:
        if target is None:
            return []
        from templtune.autotvm.record import check_config

        target = as_target(target)
        for k in (target_model(target), *target_keys(target)):
            if (k, workload) in self._best_user_defined:
                return [(self._best_user_defined[(k, workload)], 0.0)]
            table = self.best_by_model if k == target_model(target) else self.best_by_targetkey
            if self._best(table, (k, workload), target, workload) is None:
                continue
            ckey = (id(table), (k, workload))
            if ckey not in self._valid:
                space = _space_of(target, workload)
                heap = sorted(self._candidates[ckey], key=lambda c: c[:2], reverse=True)
                self._valid[ckey] = [(inp.config, _mean(res.costs)) for _, _, inp, res in heap
                                     if space is None or check_config(space, inp.config) is None]
            return list(self._valid[ckey])
        return []

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        target = as_target(target)
        cfg.cost = 0
        self._best_user_defined[(target_model(target), workload)] = cfg
        for k in target_keys(target):
            self._best_user_defined[(k, workload)] = cfg


def apply_history_best(records: Any, strict: bool = False,
                       include_emulated: bool | None = None) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best("tune.log"): ...`` (see :class:`ApplyHistoryBest`)."""
    return ApplyHistoryBest(records, strict=strict, include_emulated=include_emulated)


def _space_of(target: Any, workload: Any) -> Any:
    """The config space of ``workload`` (run its template once in collect mode), or None when
    it cannot be had (no workload, an unregistered template, a template that raises)."""
    if not isinstance(workload, tuple) or not workload or not isinstance(workload[0], str):
        return None
    from templtune.autotvm.space import ConfigSpace
    from templtune.autotvm.task.target_compat import target_scope
    from templtune.autotvm.task.task import TASK_TABLE

    tmpl = TASK_TABLE.get(workload[0])
    if tmpl is None:
        return None
    space = ConfigSpace()
    try:
        with ApplyConfig(space), target_scope(target):
            tmpl(*workload[1:])
    except Exception as exc:  # noqa: BLE001 - the real call will raise it again, in context
        logger.debug("cannot collect the space of %r to check records: %s", workload, exc)
        return None
    return space


def _mean(costs: Any) -> float:
    costs = list(costs)
    return float(sum(costs) / len(costs)) if costs else float("inf")
