"""TOPI-style templates (a compute and a schedule registered separately) and task extraction.

::

    @autotvm.register_topi_compute("dense_nopack.x86")
    def dense_nopack(cfg, data, weight):
        ...                       # cfg.define_* and te.compute; returns the output tensor

    @autotvm.register_topi_schedule("dense_nopack.x86")
    def schedule_dense_nopack(cfg, outs):
        ...                       # returns a schedule

The compute wrapper tags its output op with ``attrs["workload"]``; the schedule wrapper finds that
workload in the op graph, so both query the dispatch context with the same key.

Task extraction (TVM's ``extract_from_program``; templtune has no Relay): run a callable that
builds a program, record every template / TOPI-compute call, and create one task per distinct
workload in first-seen order.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any

from templtune.autotvm import env
from templtune.autotvm.dispatcher import DispatchContext
from templtune.autotvm.task.target_compat import as_target, current_target, target_scope
from templtune.autotvm.task.task import (
    _TRACE,
    TASK_TABLE,
    Task,
    TaskTemplate,
    args_to_workload,
    create,
    trace_workload,
)
from templtune.errors import TempltuneError

logger = logging.getLogger("autotvm")

__all__ = ["register_topi_compute", "register_topi_schedule", "get_workload", "extract_tasks"]


def _register_role(task_name: str, role: str, f: Callable[..., Any]) -> None:
    tmpl = TASK_TABLE.setdefault(task_name, TaskTemplate(task_name))
    if getattr(tmpl, role) is not None:
        raise ValueError(f"a {role[1:]} function is already registered for task {task_name!r}")
    setattr(tmpl, role, f)


def _with_workload(op: Any, workload: tuple[Any, ...]) -> Any:
    attrs = tuple((k, v) for k, v in getattr(op, "attrs", ()) if k != "workload")
    return dataclasses.replace(op, attrs=attrs + (("workload", workload),))


def register_topi_compute(task_name: str, func: Callable[..., Any] | None = None) -> Any:
    """Register a compute function ``f(cfg, *args)`` for ``task_name``.

    The returned wrapper takes ``*args`` (no keywords), records the call when a task extraction
    is tracing, asks the dispatch context for the config of its workload, runs the compute, and
    returns the output tensor(s) of a copy of the output op carrying ``attrs["workload"]``.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                raise TypeError(f"TOPI compute {task_name!r} takes positional arguments only")
            workload = args_to_workload(args, task_name)
            trace_workload(workload)
            cfg = DispatchContext.current.query(current_target(allow_none=True), workload)
            node = f(cfg, *args)
            outs = node if isinstance(node, (list, tuple)) else [node]
            op = _with_workload(outs[0].op, workload)
            new = [op.output(i) for i in range(op.num_outputs)]
            return new if isinstance(node, (list, tuple)) else new[0]

        _register_role(task_name, "fcompute", wrapper)
        return wrapper

    return deco if func is None else deco(func)


def get_workload(outs: Any, task_name: str | None = None) -> tuple[Any, ...] | None:
    """The ``workload`` attribute of the first op (inputs first) in the graph of ``outs`` whose
    workload names ``task_name`` (any task when None)."""
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    visited: set[int] = set()
    found: list[tuple[Any, ...]] = []

    def walk(op: Any) -> None:
        if id(op) in visited or found:
            return
        visited.add(id(op))
        for t in op.input_tensors:
            walk(t.op)
        wkl = dict(getattr(op, "attrs", ())).get("workload")
        if wkl is not None and not found and (task_name is None or wkl[0] == task_name):
            found.append(wkl)

    for o in outs:
        walk(getattr(o, "op", o))
    return found[0] if found else None


def register_topi_schedule(task_name: str, func: Callable[..., Any] | None = None) -> Any:
    """Register a schedule function ``f(cfg, outs)`` for ``task_name``; the wrapper takes
    ``outs`` and finds the workload tagged by the matching compute."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(outs: Any, *args: Any, **kwargs: Any) -> Any:
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            workload = get_workload(outs, task_name)
            if workload is None:
                raise TempltuneError(f"cannot find workload {task_name!r} in the outputs; is "
                                     "the compute registered with register_topi_compute?")
            cfg = DispatchContext.current.query(current_target(allow_none=True), workload)
            return f(cfg, outs, *args, **kwargs)

        _register_role(task_name, "fschedule", wrapper)
        return wrapper

    return deco if func is None else deco(func)


def extract_tasks(program: Callable[[], Any], target: Any, target_host: Any = None,
                  ops: Iterable[str] | None = None, allow_duplicate: bool = False) -> list[Task]:
    """Tasks for every template / TOPI-compute call made while ``program()`` runs.

    Parameters
    ----------
    program : callable
        Builds the program (e.g. declares a network with TOPI computes); it runs inside
        ``with target`` with fallback configs and no fallback warnings.
    target, target_host : Target or str
    ops : iterable of str, optional
        Keep only these task names.
    allow_duplicate : bool
        Keep repeated workloads (default: first occurrence only).

    Returns
    -------
    list of Task
        In first-seen order. Workloads whose task creation fails are skipped with a warning.
    """
    target = as_target(target)
    trace: list[tuple[Any, ...]] = []
    token = _TRACE.set(trace)
    try:
        with env.scope(silent=True), target_scope(target):
            program()
    finally:
        _TRACE.reset(token)
    wanted = None if ops is None else set(ops)
    seen: set[tuple[Any, ...]] = set()
    tasks = []
    for wkl in trace:
        if (wanted is not None and wkl[0] not in wanted) or (wkl in seen and not allow_duplicate):
            continue
        seen.add(wkl)
        try:
            tasks.append(create(wkl[0], wkl[1:], target, target_host))
        except Exception as exc:  # noqa: BLE001 - skip and report, as TVM does
            logger.warning("skipping task %s: %s: %s", wkl, type(exc).__name__, exc)
    return tasks
