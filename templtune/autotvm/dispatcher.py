"""Dispatch contexts: which configuration a template call gets.

A template asks ``DispatchContext.current.query(target, workload)``. The current context lives in
a :class:`contextvars.ContextVar` (no global stack); entering a context makes it current and
exiting restores the previous one. A context that cannot answer (``_query_inside`` returns None)
delegates to the context that was current when it was created or entered; the chain ends at a
:class:`FallbackContext`, which always answers.

Improvements over TVM (SPEC §2.3, §9):

* the fallback warning names the target and the workload and is logged once per
  (target, workload) and context, on logger ``templtune.autotvm``;
* strict mode: ``FallbackContext(strict=True)``, ``ApplyHistoryBest(..., strict=True)``,
  ``env.scope(strict=True)`` or ``TEMPLTUNE_AUTOTVM_STRICT=1`` make a miss raise
  :class:`ConfigNotFoundError` naming the workload;
* on a miss the fallback first consults pre-tuned reference logs (see
  :mod:`templtune.autotvm.task.reference`; off with ``TEMPLTUNE_NO_TOPHUB=1``).

Contexts are per thread of execution as ``contextvars`` are: a new thread starts at the root
fallback context.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Iterable, Iterator
from contextvars import ContextVar, Token
from typing import Any

from templtune.autotvm import env
from templtune.autotvm.task.target_compat import as_target, target_keys, target_model
from templtune.errors import TargetError, TempltuneError

logger = logging.getLogger("autotvm")

__all__ = [
    "DispatchContext", "ApplyConfig", "ApplyHistoryBest", "FallbackContext", "ConfigNotFoundError",
    "ApplyFixedConfig", "ApplyGraphBest", "apply_graph_best", "apply_history_best", "clear_fallback_cache",
]


class ConfigNotFoundError(TempltuneError, LookupError):
    """Strict mode: no tuned configuration exists for a (target, workload)."""


class _DispatchMeta(type):
    @property
    def current(cls) -> DispatchContext:
        """The dispatch context of the current execution context."""
        return _CURRENT.get()


class DispatchContext(metaclass=_DispatchMeta):
    """Base class: answers ``query(target, workload)`` with a config, or delegates."""

    def __init__(self) -> None:
        self._parent: DispatchContext | None = _CURRENT.get() if _ROOT_READY else None
        self._tokens: list[tuple[Token[DispatchContext], DispatchContext | None]] = []

    def query(self, target: Any, workload: Any) -> Any:
        """The config for ``workload`` on ``target`` from this context or its parents."""
        ret = self._query_inside(target, workload)
        if ret is None and self._parent is not None:
            ret = self._parent.query(target, workload)
        return ret

    def _query_inside(self, target: Any, workload: Any) -> Any:
        raise NotImplementedError

    def query_cost(self, target: Any, workload: Any) -> float | None:
        """Mean measured seconds of the record that would answer ``query`` (this context or a
        parent); None when no tuning record answers it (a fallback config).

        templtune addition: a network compiler uses it to pick, among the implementations of an
        operator that have records, the fastest one, as TVM's strategy selection does."""
        ret = self._cost_inside(target, workload)
        if ret is None and self._parent is not None:
            ret = self._parent.query_cost(target, workload)
        return ret

    def _cost_inside(self, target: Any, workload: Any) -> float | None:
        return None

    def query_candidates(self, target: Any, workload: Any) -> list[tuple[Any, float]]:
        """``(config, mean seconds)`` of the fastest usable records, fastest first, of the
        context that answers ``query`` for ``workload`` with a record (at most
        ``_CANDIDATES``); empty when none does.

        templtune addition: the alter-layout pass weighs a layer's records at several channel
        blockings against the layout transforms each would need."""
        ret = self._candidates_inside(target, workload)
        if not ret and self._parent is not None:
            ret = self._parent.query_candidates(target, workload)
        return ret

    def _candidates_inside(self, target: Any, workload: Any) -> list[tuple[Any, float]]:
        return []

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        """Store ``cfg`` as the answer for (target, workload)."""
        raise NotImplementedError

    def __enter__(self) -> DispatchContext:
        prev_parent = self._parent
        self._parent = _CURRENT.get()
        if self._parent is self:
            self._parent = prev_parent
        self._tokens.append((_CURRENT.set(self), prev_parent))
        return self

    def __exit__(self, *exc: Any) -> None:
        token, prev_parent = self._tokens.pop()
        _CURRENT.reset(token)
        self._parent = prev_parent


class ApplyConfig(DispatchContext):
    """Answer every query with one config (records the last workload asked for)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self._config = config
        self.workload: Any = None

    def _query_inside(self, target: Any, workload: Any) -> Any:
        self.workload = workload
        return self._config

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        self._config = cfg


def _is_pair(x: Any) -> bool:
    return (isinstance(x, (tuple, list)) and len(x) == 2 and hasattr(x[0], "config")
            and hasattr(x[1], "costs"))


def iter_records(records: Any) -> Iterator[tuple[Any, Any]]:
    """Flatten paths, text streams, ``(MeasureInput, MeasureResult)`` pairs and any nesting of
    them into pairs."""
    from templtune.autotvm import record

    if records is None:
        return
    if isinstance(records, (str, bytes, os.PathLike)):
        yield from record.load_from_file(os.fsdecode(records))
    elif hasattr(records, "read"):
        yield from record.load_from_buffer(records)
    elif _is_pair(records):
        yield records[0], records[1]
    elif isinstance(records, Iterable):
        for r in records:
            yield from iter_records(r)
    else:
        raise TypeError(f"cannot read tuning records from {type(records).__name__} {records!r}")


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
        from templtune.autotvm.record import usable_cost

        n = skipped = 0
        use_emulated: bool | None = None  # decided at the first emulated record (probes CUDA)
        for inp, res in iter_records(records):
            n += 1
            cost = usable_cost(res)
            if cost is None:
                continue
            if getattr(res, "device", "") == "emulator":
                if use_emulated is None:
                    from templtune.runtime.cuda.backend import use_emulated_records

                    use_emulated = use_emulated_records(self.include_emulated)
                if not use_emulated:
                    skipped += 1
                    continue
            self._add(inp, res, cost)
            if self._by_threads is not None:
                self._threads_view(int(getattr(res, "threads", 0) or 0))._add(inp, res, cost)
        logger.debug("loaded %d tuning records", n)
        if skipped:
            logger.warning("ignored %d records timed on the CPU CUDA emulator (CPU timings; "
                           "include_emulated=True uses them)", skipped)

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


class FallbackContext(DispatchContext):
    """Build (and cache) a default :class:`FallbackConfigEntity` for each (target, workload).

    Parameters
    ----------
    strict : bool
        Raise :class:`ConfigNotFoundError` instead of falling back.
    """

    def __init__(self, strict: bool = False) -> None:
        super().__init__()
        self._parent = None
        self.strict = strict
        # NOTE: keyed by the reference-log switch too: a config answered from a reference
        # log must not serve a query made with reference logs off (nor the reverse); and by
        # the build's thread count, which picks among a reference log's records
        self.memory: dict[tuple[str, Any, bool, int], Any] = {}
        self._warned: set[tuple[str, Any, bool, int]] = set()
        self._reference: dict[str, Any] = {}

    def _key(self, target: Any, workload: Any) -> tuple[str, Any, bool, int]:
        from templtune.codegen.llvm.compile import default_num_threads

        threads = default_num_threads(as_target(target)) if target is not None else 0
        return str(target), workload, env.reference_logs_enabled(), threads

    def _query_inside(self, target: Any, workload: Any) -> Any:
        key = self._key(target, workload)
        if key in self.memory:
            return self.memory[key]
        if self.strict or env.strict_enabled():
            raise ConfigNotFoundError(f"no tuned config for workload {workload!r} on target "
                                      f"'{target}' (strict mode: fallback configs are disabled)")
        cfg = self._from_reference(target, workload)
        if cfg is None:
            from templtune.autotvm.task.fallback import FallbackConfigEntity

            cfg = FallbackConfigEntity()
            if not env.current().silent and key not in self._warned:
                self._warned.add(key)
                logger.warning("Cannot find a tuned config for target '%s', workload %r; using a "
                               "fallback configuration, which may be slow. Tune this workload "
                               "and use apply_history_best(log).", target, workload)
        self.memory[key] = cfg
        return cfg

    def _reference_ctx(self, target: Any, workload: Any) -> Any:
        """The reference logs' context of ``target`` (loaded once), or None: reference logs
        off, no target or workload, or no log for the target."""
        if target is None or workload is None or not env.reference_logs_enabled():
            return None
        from templtune.autotvm.task import reference

        tkey = str(target)
        if tkey not in self._reference:
            self._reference[tkey] = reference.reference_context(target)
        return self._reference[tkey]

    def _from_reference(self, target: Any, workload: Any) -> Any:
        ctx = self._reference_ctx(target, workload)
        return None if ctx is None else ctx._query_inside(as_target(target), workload)

    def _cost_inside(self, target: Any, workload: Any) -> float | None:
        ctx = self._reference_ctx(target, workload)
        return None if ctx is None else ctx._cost_inside(target, workload)

    def _candidates_inside(self, target: Any, workload: Any) -> list[tuple[Any, float]]:
        ctx = self._reference_ctx(target, workload)
        return [] if ctx is None else ctx._candidates_inside(target, workload)

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        self.memory[self._key(target, workload)] = cfg

    def clear_cache(self, target: Any, workload: Any) -> None:
        """Forget the cached config of (target, workload)."""
        for key in [k for k in self.memory.keys() | self._warned if k[:2] == (str(target),
                                                                          workload)]:
            self.memory.pop(key, None)
            self._warned.discard(key)


class ApplyFixedConfig(DispatchContext):
    """Answer with the first valid config of the task named by the workload (for testing a
    fixed schedule). ``cost`` is set to 1e-6 for tasks in ``schedule_names`` and 1e5 otherwise.

    Unlike TVM, a single string ``schedule_names`` means one name (TVM splits it into
    characters).
    """

    def __init__(self, tasks: Iterable[Any], schedule_names: str | Iterable[str]) -> None:
        super().__init__()
        self._tasks = list(tasks)
        self._names = {schedule_names} if isinstance(schedule_names, str) else set(schedule_names)
        self.workload: Any = None

    def _query_inside(self, target: Any, workload: Any) -> Any:
        if workload is None:
            return None
        self.workload = workload
        for task in self._tasks:
            if task.name == workload[0]:
                space = task.config_space
                first = 0 if space.is_index_valid(0) else space.get_next_index(0)
                if first is None:
                    raise TempltuneError(f"task {task.name!r} has no valid config")
                cfg = space.get(first)
                cfg.cost = 1e-6 if task.name in self._names else 1e5
                return cfg
        raise TempltuneError(f"ApplyFixedConfig: no task for workload {workload!r} (tasks: "
                             f"{sorted({t.name for t in self._tasks})})")

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        raise TempltuneError("ApplyFixedConfig cannot be updated")


class ApplyGraphBest(DispatchContext):
    """Answer queries with ``records`` in order (each must match the queried workload), then
    with per-(target, workload) fallback configs (warned once each)."""

    def __init__(self, records: Any) -> None:
        super().__init__()
        self._records = list(iter_records(records))
        self._counter = 0
        self._fallback: dict[tuple[str, Any], Any] = {}

    def _query_inside(self, target: Any, workload: Any) -> Any:
        if self._counter < len(self._records):
            inp, _ = self._records[self._counter]
            if inp.task.workload != workload:
                raise TempltuneError(f"ApplyGraphBest: record {self._counter} is for "
                                     f"{inp.task.workload!r}, the query is for {workload!r}")
            self._counter += 1
            return inp.config
        key = (str(target), workload)
        if key not in self._fallback:
            from templtune.autotvm.task.fallback import FallbackConfigEntity

            if not env.current().silent:
                logger.warning("ApplyGraphBest: no record left for target '%s', workload %r; "
                               "using a fallback configuration", target, workload)
            self._fallback[key] = FallbackConfigEntity()
        return self._fallback[key]

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        self._fallback[(str(target), workload)] = cfg


def apply_graph_best(records: Any) -> ApplyGraphBest:
    """The graph tuner's choices (``write_opt_sch2record_file``'s file, or its records) as a
    dispatch context: ``with autotvm.apply_graph_best(path): relay.build(...)`` (at
    ``opt_level=3``) gives each convolution, in order, its chosen config and layout."""
    return ApplyGraphBest(records)


_ROOT_READY = False
_ROOT = FallbackContext()
_CURRENT: ContextVar[DispatchContext] = ContextVar("templtune_autotvm_dispatch", default=_ROOT)
_ROOT_READY = True


def clear_fallback_cache(target: Any, workload: Any) -> None:
    """Clear (target, workload) from the fallback context at the root of the current chain."""
    ctx: DispatchContext | None = DispatchContext.current
    while ctx is not None and not isinstance(ctx, FallbackContext):
        ctx = ctx._parent
    if ctx is not None:
        ctx.clear_cache(target, workload)
