"""What a tuning report shows, read from AutoTVM and auto-scheduler logs.

A log is read into one :class:`TaskCurve` per task (its trials in log order) and, when it holds
several tasks, a :class:`NetworkCurve`: the task scheduler's objective (the weighted sum of each
task's best latency) replayed over the trials. Task weights and FLOP counts come from the task
table that ``templtune tune-network`` writes next to its log (``LOG.tasks.json``); without it
every task weighs 1 and FLOPs are recomputed where the workload can be rebuilt.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("templtune.cli")

#: error names by code, as in AutoTVM's and the auto-scheduler's ``MeasureErrorNo``.
ERROR_NAMES = ("NO_ERROR", "INSTANTIATION_ERROR", "COMPILE_HOST", "COMPILE_DEVICE",
               "RUNTIME_DEVICE", "WRONG_ANSWER", "BUILD_TIMEOUT", "RUN_TIMEOUT", "UNKNOWN_ERROR")


class LogFormat(enum.Enum):
    """The two record formats a report reads."""

    AUTOTVM = "autotvm"
    AUTO_SCHEDULER = "auto_scheduler"


class ReportError(ValueError):
    """A log that cannot be reported on (missing, empty, or not a tuning log)."""


@dataclass(frozen=True, slots=True)
class Trial:
    """One measurement: its cost in seconds (None when it failed), error code and time."""

    cost_s: float | None
    error_no: int
    timestamp: float


@dataclass(frozen=True, slots=True)
class TaskCurve:
    """The trials of one task, in log order, and its best record."""

    key: str
    label: str
    fmt: LogFormat
    flop: float | None
    weight: float
    trials: tuple[Trial, ...]
    best_config: str

    @property
    def best_cost_s(self) -> float | None:
        costs = [t.cost_s for t in self.trials if t.cost_s is not None]
        return min(costs) if costs else None

    @property
    def best_gflops(self) -> float | None:
        c = self.best_cost_s
        return self.flop / c / 1e9 if c and self.flop else None

    @property
    def errors(self) -> int:
        return sum(t.error_no != 0 for t in self.trials)


@dataclass(frozen=True, slots=True)
class NetworkCurve:
    """The estimated network latency (weighted sum of per-task best latencies) after each
    trial of the merged logs, NaN until every task has a valid measurement."""

    latency_ms: tuple[float, ...]
    elapsed_s: tuple[float, ...]
    weights_known: bool


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything one report page shows."""

    logs: tuple[str, ...]
    tasks: tuple[TaskCurve, ...]
    network: NetworkCurve | None


def task_table_path(log: str | os.PathLike[str]) -> Path:
    """The task table written next to a network log (``LOG.tasks.json``)."""
    return Path(f"{os.fspath(log)}.tasks.json")


def write_task_table(log: str | os.PathLike[str], rows: Sequence[dict[str, Any]]) -> Path:
    """Write the per-task ``key``, ``label``, ``weight`` and ``flop`` of a network log.

    Parameters
    ----------
    log : path
        The records log; the table goes to ``LOG.tasks.json``.
    rows : sequence of dict
        One dict per task with ``key`` (the workload key, or ``name(args)`` for AutoTVM),
        ``label``, ``weight`` and ``flop``.
    """
    path = task_table_path(log)
    path.write_text(json.dumps({"tasks": list(rows)}, indent=1) + "\n", encoding="utf-8")
    return path


def _read_task_table(log: str) -> dict[str, dict[str, Any]]:
    path = task_table_path(log)
    if not path.is_file():
        return {}
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["tasks"]
        return {str(r["key"]): r for r in rows}
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("%s: ignoring an unreadable task table (%s)", path, exc)
        return {}


def detect_format(path: str) -> LogFormat:
    """The record format of the first record line of ``path``."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                break
            if isinstance(obj, dict) and "input" in obj and "result" in obj:
                return LogFormat.AUTOTVM
            if isinstance(obj, dict) and "i" in obj and "r" in obj:
                return LogFormat.AUTO_SCHEDULER
            break
    raise ReportError(f"{path}: not an AutoTVM or auto-scheduler tuning log (its first record "
                      "is neither)")


def _autotvm_flop(name: str, args: tuple, target: str) -> float | None:
    """FLOPs of a packaged-template task, or None when it cannot be recreated here."""
    try:
        from templtune import autotvm
        from templtune.autotvm.record import args_within_bounds
        from templtune.autotvm.strategy import load_templates

        if not args_within_bounds(args):
            return None  # a log line must not make the report compute for long
        load_templates()
        return float(autotvm.task.create(name, args, target).flop) or None
    except Exception as exc:  # noqa: BLE001 - an unknown template only loses the GFLOPS axis
        logger.info("no FLOP count for %s%s: %s", name, args, exc)
        return None


def _as_flop(key: str) -> float | None:
    try:
        from templtune.auto_scheduler.compute_dag import ComputeDAG
        from templtune.auto_scheduler.workload_registry import workload_key_to_tensors

        return float(ComputeDAG(workload_key_to_tensors(key)).flop_ct) or None
    except Exception as exc:  # noqa: BLE001 - an unregistered workload only loses GFLOPS
        logger.info("no FLOP count for workload %s: %s", key, exc)
        return None


def _trial(costs: Sequence[float], error_no: int, timestamp: float) -> Trial:
    ok = error_no == 0 and len(costs) > 0 and all(math.isfinite(c) for c in costs)
    return Trial(sum(costs) / len(costs) if ok else None, int(error_no), float(timestamp))


def _read_autotvm(path: str) -> list[tuple[str, str, str, Trial, str, tuple]]:
    from templtune.autotvm.record import load_from_file

    out = []
    for inp, res in load_from_file(path):
        key = f"{inp.task.name}{tuple(inp.task.args)}"
        config = f"{inp.config}"
        out.append((key, str(inp.target), config, _trial(res.costs, res.error_no,
                                                           res.timestamp),
                    inp.task.name, tuple(inp.task.args)))
    return out


def _read_auto_scheduler(path: str) -> list[tuple[str, str, str, Trial]]:
    from templtune.auto_scheduler.measure_record import RecordReader

    out = []
    for inp, res in RecordReader(path):
        steps = "; ".join(json.dumps(s.encode()) for s in inp.state.transform_steps)
        out.append((inp.task.workload_key, inp.task.target, steps,
                    _trial(res.costs, res.error_no, res.timestamp)))
    return out


def _as_label(key: str) -> str:
    try:
        obj = json.loads(key)
        if isinstance(obj, list) and obj:
            return f"{obj[0]}{tuple(obj[1:])}"
    except ValueError:
        pass
    return key


def load_report_data(logs: Sequence[str | os.PathLike[str]]) -> ReportData:
    """Read ``logs`` (AutoTVM or auto-scheduler, mixed) into the report's data.

    Raises
    ------
    ReportError
        A log is missing, holds no records, or is not a tuning log.
    """
    rows: list[tuple[str, LogFormat, str, str, Trial]] = []
    flops: dict[str, float | None] = {}
    table: dict[str, dict[str, Any]] = {}
    for log in (os.fspath(x) for x in logs):
        if not os.path.isfile(log):
            raise ReportError(f"{log}: no such log file")
        table.update(_read_task_table(log))
        fmt = detect_format(log)
        if fmt is LogFormat.AUTOTVM:
            for key, target, config, trial, name, args in _read_autotvm(log):
                rows.append((key, fmt, target, config, trial))
                if key not in flops:
                    flops[key] = (float(table[key]["flop"]) if key in table
                                  else _autotvm_flop(name, args, target))
        else:
            for key, target, config, trial in _read_auto_scheduler(log):
                rows.append((key, fmt, target, config, trial))
                if key not in flops:
                    flops[key] = float(table[key]["flop"]) if key in table else _as_flop(key)
    if not rows:
        raise ReportError(f"no tuning records in {', '.join(os.fspath(x) for x in logs)}")
    rows.sort(key=lambda r: r[4].timestamp)  # several logs: one timeline
    order: list[str] = []
    per_task: dict[str, list[tuple[str, Trial, str, LogFormat]]] = {}
    for key, fmt, target, config, trial in rows:
        if key not in per_task:
            order.append(key)
            per_task[key] = []
        per_task[key].append((config, trial, target, fmt))
    tasks = []
    for key in order:
        recs = per_task[key]
        ok = [(t.cost_s, c) for c, t, _, _ in recs if t.cost_s is not None]
        best = min(ok, key=lambda p: p[0])[1] if ok else "(no successful trial)"
        fmt = recs[0][3]
        info = table.get(key, {})
        label = str(info.get("label") or (_as_label(key) if fmt is LogFormat.AUTO_SCHEDULER
                                          else key))
        tasks.append(TaskCurve(key, f"{label} [{recs[0][2]}]", fmt, flops.get(key),
                               float(info.get("weight", 1.0)), tuple(t for _, t, _, _ in recs),
                               best))
    network = _network_curve(rows, tasks, weights_known=bool(table)) if len(tasks) > 1 else None
    return ReportData(tuple(os.fspath(x) for x in logs), tuple(tasks), network)


def _network_curve(rows: list, tasks: list[TaskCurve], weights_known: bool) -> NetworkCurve:
    weight = {t.key: t.weight for t in tasks}
    best: dict[str, float] = {}
    lat, elapsed = [], []
    t0 = rows[0][4].timestamp
    for key, _, _, _, trial in rows:
        if trial.cost_s is not None and trial.cost_s < best.get(key, math.inf):
            best[key] = trial.cost_s
        total = (sum(weight[k] * c for k, c in best.items()) * 1e3
                 if len(best) == len(weight) else math.nan)
        lat.append(total)
        elapsed.append(trial.timestamp - t0)
    return NetworkCurve(tuple(lat), tuple(elapsed), weights_known)
