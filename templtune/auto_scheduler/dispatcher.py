"""Dispatch contexts: which schedule (state) a workload gets when a program is compiled.

As in TVM, contexts nest: a query that the innermost context cannot answer goes to the one it
was entered in, and the root is a :class:`FallbackContext` that answers None (use the default
schedule). :class:`ApplyHistoryBest` answers from records, :class:`ApplyHistoryBestOrSample`
additionally samples a schedule for a workload without a record.
"""

from __future__ import annotations

import contextvars
import hashlib
import heapq
import logging
import tempfile
from typing import Any

from templtune.autotvm.record import usable_records
from templtune.target import kind_of

from .measure_record import (
    CANDIDATES,
    RecordReader,
    check_steps,
    workload_distance_factor,
)

logger = logging.getLogger("auto_scheduler")

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("auto_scheduler_dispatch",
                                                              default=None)

__all__ = ["ApplyHistoryBest", "ApplyHistoryBestOrSample", "DispatchContext", "FallbackContext"]


def _kind(target: Any) -> str:
    return str(kind_of(target))


class _Current:
    """``DispatchContext.current``: the innermost entered context, else the root fallback."""

    def __get__(self, obj: Any, owner: Any) -> DispatchContext:
        ctx = _CURRENT.get()
        return ctx if ctx is not None else _ROOT


class DispatchContext:
    """Base of the auto-scheduler's dispatch contexts (TVM's ``auto_scheduler.DispatchContext``).

    Subclasses answer :meth:`_query_inside`; :meth:`query` falls back to the enclosing context.
    ``DispatchContext.current`` is the innermost entered context (the root
    :class:`FallbackContext` outside any ``with``).
    """

    current = _Current()

    def __init__(self) -> None:
        self._old_ctx: DispatchContext | None = None
        self._token: Any = None

    def query(self, target: Any, workload_key: str, has_complex_op: bool = True,
              dag: Any = None, func_name: str | None = None) -> Any:
        """The state to use for ``workload_key`` on ``target``, or None (default schedule).

        Parameters
        ----------
        target : Target or str
        workload_key : str
        has_complex_op : bool
            Whether the workload has a complex (reduction) op; only those are sampled or warned
            about. Callers that do not know pass True.
        dag : ComputeDAG, optional
            The workload's DAG (lets a sampling context build its task without the registry).
        func_name : str, optional
            A name for messages.
        """
        ret = self._query_inside(target, workload_key, func_name, dag)
        if ret is None and self._old_ctx is not None:
            ret = self._old_ctx.query(target, workload_key, has_complex_op, dag, func_name)
        return ret

    def update(self, target: Any, workload_key: str, state: Any) -> None:
        """Make ``state`` the answer for ``workload_key`` on ``target``."""
        raise NotImplementedError(f"{type(self).__name__} does not take updates")

    def _query_inside(self, target: Any, workload_key: str, func_name: str | None,
                      dag: Any = None) -> Any:
        raise NotImplementedError

    def __enter__(self) -> DispatchContext:
        # NOTE: the enclosing *entered* context; misses at the outermost level are not sent to
        # the root fallback, so compiling a network under ApplyHistoryBest does not warn for
        # every untuned (often elementwise) group.
        self._old_ctx = _CURRENT.get()
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)
        self._old_ctx = None


class FallbackContext(DispatchContext):
    """The root context: no schedule for anything (the default schedules are used); logs a
    warning once per workload with a complex op (``verbose=1``) or for every miss (``2``)."""

    def __init__(self, verbose: int = 1) -> None:
        super().__init__()
        self.verbose = verbose
        self.memory: dict[tuple[str, str], Any] = {}

    def query(self, target: Any, workload_key: str, has_complex_op: bool = True,
              dag: Any = None, func_name: str | None = None) -> Any:
        key = (str(target), workload_key)
        if key in self.memory:
            return self.memory[key]
        if (self.verbose == 1 and has_complex_op) or self.verbose == 2:
            logger.warning("-----------------------------------\n%s\nCannot find tuned schedules "
                           "for target=%s, workload_key=%s. A fallback TOPI schedule is used, "
                           "which may bring great performance regression or even compilation "
                           "failure.%s", func_name or "", target, workload_key,
                           f" Compute DAG info:\n{dag}" if dag is not None else "")
        self.memory[key] = None
        return None

    def _query_inside(self, target: Any, workload_key: str, func_name: str | None,
                      dag: Any = None) -> Any:
        return self.memory.get((str(target), workload_key))

    def update(self, target: Any, workload_key: str, state: Any) -> None:
        self.memory[(str(target), workload_key)] = state


_ROOT = FallbackContext()


class ApplyHistoryBest(DispatchContext):
    """Query the best record of a workload (also usable as a context manager).

    Parameters
    ----------
    records : str, list of str, or list of (input, result)
    n_lines : int, optional
        Load only the first ``n_lines`` records.
    include_compatible : bool
        Allow records of compatible (divisible-shape) workloads.
    include_emulated : bool or None
        Use records timed on the CPU CUDA emulator (``"device": "emulator"``). None (default):
        only when CUDA modules run on the emulator here; on a real GPU they are ignored.

    Notes
    -----
    Only successful records with finite, positive costs compete. A query that passes the
    task's ``dag`` gets the fastest of the ``CANDIDATES`` fastest records whose steps fit it
    (:func:`~.measure_record.check_steps`); the others are skipped with a warning.
    """

    def __init__(self, records: Any, n_lines: int | None = None,
                 include_compatible: bool = False, include_emulated: bool | None = None) -> None:
        super().__init__()
        self.include_compatible = include_compatible
        self.include_emulated = include_emulated
        self.best: dict[str, dict[str, tuple[Any, float]]] = {}
        # (kind, key) -> heap of (-cost, -seq, state): the CANDIDATES fastest records
        self._candidates: dict[tuple[str, str], list[tuple[float, int, Any]]] = {}
        self._checked: set[tuple[str, str]] = set()
        self._seq = 0
        self._token: Any = None
        self.load(records, n_lines)

    def load(self, records: Any, n_lines: int | None = None) -> None:
        if records is None:
            return
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
        # NOTE: only finite, positive costs of successful records compete (a NaN cost
        # that came first would otherwise never be replaced).
        for inp, _, cost in usable_records(pairs, self.include_emulated):
            kind = _kind(inp.task.target)
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

    def _query_inside(self, target: Any, workload_key: str, func_name: str | None = None,
                      dag: Any = None) -> Any:
        """The best record's state (steps) for the workload, or None. With ``dag`` (the
        task's ComputeDAG), only a record whose steps fit it."""
        kind = _kind(target)
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
        kind = _kind(target)
        self.best.setdefault(kind, {})[workload_key] = (state, 1.0)
        self._checked.add((kind, workload_key))  # the caller's choice is not vetted

    def __enter__(self) -> ApplyHistoryBest:
        super().__enter__()
        return self

    @staticmethod
    def current() -> Any:  # type: ignore[override]
        """The innermost entered context, or None outside any (templtune's graph compiler)."""
        return _CURRENT.get()


class ApplyHistoryBestOrSample(ApplyHistoryBest):
    """:class:`ApplyHistoryBest` that samples a schedule for a workload without a record.

    On a miss (for workloads with a complex op, or every workload with
    ``sample_simple_workloads``) a short search runs, as TVM's: eps-greedy 0.01, an initial
    population of at least 64, no evolution rounds. With ``num_measure > 1`` that many
    candidates are measured on this machine and the best record answers; otherwise the cost
    model's best candidate answers unmeasured.

    Parameters
    ----------
    records : str, list, or None
        As :class:`ApplyHistoryBest` (None: start empty).
    sample_simple_workloads : bool
    cost_model_file : str, optional
        A saved :class:`XGBModel` to rank the samples (an untrained model ranks randomly).
    num_measure : int
        Trials to measure per sampled workload.
    """

    _MAX_ROUNDS = 3  # NOTE: TVM retries forever; give up (default schedule) after a few rounds

    def __init__(self, records: Any, sample_simple_workloads: bool = False,
                 cost_model_file: str | None = None, num_measure: int = -1) -> None:
        import os

        from .cost_model import XGBModel

        super().__init__(records)
        self.sample_simple_workloads = sample_simple_workloads
        self.num_measure = num_measure
        self.cost_model = XGBModel()
        if cost_model_file and os.path.isfile(cost_model_file):
            self.cost_model.load(cost_model_file)
        self.log_dir = tempfile.mkdtemp(prefix="templtune_sample_")

    def query(self, target: Any, workload_key: str, has_complex_op: bool = True,
              dag: Any = None, func_name: str | None = None) -> Any:
        ret = ApplyHistoryBest._query_inside(self, target, workload_key, func_name, dag)
        if ret is None and (has_complex_op or self.sample_simple_workloads):
            ret = self._sample(target, workload_key, dag)
        if ret is None and self._old_ctx is not None:
            ret = self._old_ctx.query(target, workload_key, has_complex_op, dag, func_name)
        return ret

    def _sample(self, target: Any, workload_key: str, dag: Any) -> Any:
        import os

        from .measure import LocalRPCMeasureContext
        from .measure_record import RecordToFile
        from .search_policy import PreloadMeasuredStates, SketchPolicy
        from .search_task import SearchTask, TuningOptions

        task = SearchTask(compute_dag=dag, workload_key=workload_key, target=target)
        params = {"eps_greedy": 0.01, "sample_init_min_population": 64,
                  "evolutionary_search_num_iters": 0}
        digest = hashlib.md5(workload_key.encode()).hexdigest()
        log_file = os.path.join(self.log_dir, f"{digest}.json")
        for _ in range(self._MAX_ROUNDS):
            callbacks = [PreloadMeasuredStates(log_file)] if os.path.exists(log_file) else []
            policy = SketchPolicy(task, self.cost_model, params=params, verbose=0,
                                  init_search_callbacks=callbacks)
            if self.num_measure <= 1:
                state = task.tune(TuningOptions(num_measure_trials=self.num_measure, verbose=0),
                                  policy)
                if state is not None:
                    self.update(target, workload_key, state)
            else:
                ctx = LocalRPCMeasureContext(min_repeat_ms=300)
                opts = TuningOptions(num_measure_trials=self.num_measure, runner=ctx.runner,
                                     measure_callbacks=[RecordToFile(log_file)], verbose=0)
                task.tune(opts, policy)
                self.load(log_file)
            ret = ApplyHistoryBest._query_inside(self, target, workload_key, None)
            if ret is not None:
                return ret
        logger.warning("ApplyHistoryBestOrSample: no valid sample for %s after %d rounds",
                       workload_key, self._MAX_ROUNDS)
        return None
