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

import logging
import os
from collections.abc import Iterable, Iterator
from contextvars import ContextVar, Token
from typing import Any

from templtune.autotvm import env
from templtune.autotvm.task.target_compat import as_target
from templtune.errors import TempltuneError

logger = logging.getLogger("autotvm")

__all__ = [
    "DispatchContext", "ApplyConfig", "FallbackContext", "ConfigNotFoundError", "ApplyFixedConfig",
    "ApplyGraphBest", "apply_graph_best", "clear_fallback_cache", "iter_records",
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


#: names that live in :mod:`templtune.autotvm.history`, kept importable from here (TVM's
#: ``autotvm.task.dispatcher.ApplyHistoryBest``); resolved on first use, since that module
#: builds on the contexts defined here
_HISTORY = frozenset({"ApplyHistoryBest", "apply_history_best"})


def __getattr__(name: str) -> Any:
    if name in _HISTORY:
        from templtune.autotvm import history

        return getattr(history, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
