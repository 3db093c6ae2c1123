"""Re-measure each task's fastest configs side by side before trusting the ranking.

A tuning run measures each config once, at its own moment; on a shared machine whose speed
drifts, a config measured in a fast moment can outrank a better one measured in a slow moment,
and the log's best record is then a lucky sample. :func:`remeasure_best` measures the ``top``
fastest distinct configs of each task again in one batch (with a runner of more repeats) and
writes those measurements to a second log, from which a build takes its records, as TVM's
tutorials build from ``pick_best``'s file. The tuning log itself is not changed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from templtune.autotvm.measure import MeasureInput, create_measure_batch
from templtune.autotvm.record import append_records, load_from_file, usable_cost
from templtune.autotvm.tuner.tuner import is_space_point

logger = logging.getLogger("autotvm")

__all__ = ["remeasure_best"]


def _fastest(records: list[tuple[Any, Any]], task: Any, top: int,
             keep: Callable[[Any, Any], bool] | None) -> list[int]:
    """Config indices of the ``top`` fastest distinct successful records of ``task`` (``records``
    are its own) that ``keep`` admits."""
    best: dict[int, float] = {}
    stale = 0
    for inp, res in records:
        cost = usable_cost(res)
        if cost is None or (keep is not None and not keep(task, inp.config)):
            continue
        if not is_space_point(task.config_space, inp.config):
            stale += 1  # its index names another point now: measuring it would mislabel
            continue
        idx = int(inp.config.index)
        best[idx] = min(cost, best.get(idx, cost))
    if stale:
        logger.warning("%s%s: %d logged configs are not the points their indices name in "
                       "the task's space; skipped", task.name, tuple(task.args), stale)
    return sorted(best, key=best.__getitem__)[:top]


def remeasure_best(tasks: Sequence[Any], log: str | os.PathLike[str],
                   out: str | os.PathLike[str], measure_option: dict, top: int = 4,
                   keep: Callable[[Any, Any], bool] | None = None) -> int:
    """Measure the ``top`` fastest configs of each of ``tasks`` in ``log`` again, one batch per
    task, and write the successful measurements to ``out`` (replaced). Returns the number of
    records written.

    Parameters
    ----------
    tasks : sequence of Task
    log : path
        The tuning log.
    out : path
        The log of re-measured records (build with ``apply_history_best(out)``).
    measure_option : dict
        From :func:`templtune.autotvm.measure_option`; give its runner enough repeats that one
        batch ranks its configs reliably.
    top : int
        Configs per task.
    keep : callable or None
        ``keep(task, config)``: whether a config may be a candidate (None: every one).
    """
    if top < 1:
        raise ValueError(f"remeasure_best: top must be at least 1, got {top}")
    by_workload: dict[Any, list[tuple[Any, Any]]] = {}
    for inp, res in load_from_file(os.fspath(log)):
        by_workload.setdefault(inp.task.workload, []).append((inp, res))
    tmp = f"{os.fspath(out)}.part"
    with open(tmp, "w", encoding="utf-8"):
        pass
    n = 0
    for task in tasks:
        indices = _fastest(by_workload.get(task.workload, []), task, top, keep)
        if not indices:
            continue
        inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in indices]
        results = create_measure_batch(task, measure_option)(inputs)
        ok = [(i, r) for i, r in zip(inputs, results) if usable_cost(r) is not None]
        if len(ok) < len(inputs):
            logger.warning("%s%s: %d of %d configs failed when measured again", task.name,
                           tuple(task.args), len(inputs) - len(ok), len(inputs))
        if not ok:
            # NOTE: none measured again (a loaded host, a timeout): the task keeps its
            # logged fastest record rather than losing every record to the build
            ok = [min(((inp, res) for inp, res in by_workload[task.workload]
                       if int(inp.config.index) == indices[0]),
                      key=lambda r: usable_cost(r[1]) or float("inf"))]
        n += append_records(tmp, ok)
    # NOTE: written whole, then renamed: a killed run leaves the previous file intact
    os.replace(tmp, os.fspath(out))
    return n
