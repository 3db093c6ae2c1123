"""auto_scheduler records: TVM's v0.6 JSON lines with keys ``i``, ``r``, ``v``."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .measure import MAX_FLOAT, MeasureInput, MeasureResult
from .transform_step import decode_step

logger = logging.getLogger("templtune.auto_scheduler")

AUTO_SCHEDULER_LOG_VERSION = "v0.6"


@dataclass(frozen=True, slots=True)
class RecordTask:
    """The task part of a record (no DAG needed to read a log)."""

    workload_key: str
    target: str
    hardware_params: tuple
    target_host: str
    layout_rewrite_option: int
    task_input_names: tuple


@dataclass(frozen=True, slots=True)
class RecordState:
    """The state part of a record: its transform steps (replay them with a DAG)."""

    transform_steps: tuple


def _task_json(task: Any) -> list:
    if isinstance(task, RecordTask):
        return [task.workload_key, task.target, list(task.hardware_params), task.target_host,
                task.layout_rewrite_option, list(task.task_input_names)]
    return [task.workload_key, str(task.target), task.hardware_params.to_list(),
            str(task.target_host) if task.target_host else "", task.layout_rewrite_option,
            list(task.task_input_names)]


def dump_record_to_string(inp: MeasureInput, res: MeasureResult) -> str:
    """One JSON line (no newline)."""
    steps = [s.encode() for s in inp.state.transform_steps]
    costs = list(res.costs) if int(res.error_no) == 0 else [MAX_FLOAT]
    rec: dict[str, Any] = {"i": [_task_json(inp.task), [[], steps]],
                           "r": [costs, int(res.error_no), float(res.all_cost),
                                 int(res.timestamp)],
                           "v": AUTO_SCHEDULER_LOG_VERSION}
    # NOTE: templtune keys, written only when set (TVM's reader rejects unknown keys): the
    # outputs were not compared with a reference; the failure was the infrastructure's.
    if not getattr(res, "checked", True):
        rec["checked"] = False
    if getattr(res, "infra_error", False):
        rec["infra_error"] = True
    return json.dumps(rec)


def load_record_from_string(line: str) -> tuple[MeasureInput, MeasureResult]:
    """Parse one line; accepts v0.1 ``[key, target]`` and v0.5 task arrays."""
    rec = json.loads(line)
    unknown = set(rec) - {"i", "r", "v", "checked", "infra_error"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in auto_scheduler record")
    t = rec["i"][0]
    hw = tuple(t[2]) if len(t) > 2 else ()
    task = RecordTask(t[0], t[1], hw, t[3] if len(t) > 3 else "",
                      int(t[4]) if len(t) > 4 else 0, tuple(t[5]) if len(t) > 5 else ())
    steps = tuple(decode_step(s) for s in rec["i"][1][1])
    r = rec["r"]
    res = MeasureResult(tuple(float(c) for c in r[0]), int(r[1]), "", float(r[2]), float(r[3]),
                        rec.get("checked", True) is not False, rec.get("infra_error") is True)
    return MeasureInput(task, RecordState(steps)), res


def save_records(filename: str, inputs: Iterable[MeasureInput],
                 results: Iterable[MeasureResult]) -> None:
    """Append records to ``filename`` (parent directories are created)."""
    d = os.path.dirname(os.path.abspath(filename))
    os.makedirs(d, exist_ok=True)
    with open(filename, "a", encoding="utf-8") as f:
        for inp, res in zip(inputs, results):
            f.write(dump_record_to_string(inp, res) + "\n")
        f.flush()


class RecordToFile:
    """Measure callback appending every measured record to ``filename``."""

    def __init__(self, filename: str) -> None:
        self.filename = str(filename)

    def callback(self, policy: Any, inputs: list, results: list) -> None:
        save_records(self.filename, inputs, results)


class RecordReader:
    """Reads a record file; skips comments, blank and corrupt lines (with a warning)."""

    def __init__(self, filename: str) -> None:
        self.filename = str(filename)
        if not os.path.exists(self.filename):
            logger.warning("record file %s does not exist", self.filename)

    def __iter__(self) -> Iterator[tuple[MeasureInput, MeasureResult]]:
        if not os.path.exists(self.filename):
            return
        with open(self.filename, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip() or line[0] in "# ":
                    continue
                try:
                    yield load_record_from_string(line)
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    logger.warning("%s:%d: skipping a corrupt record (%s)", self.filename, n,
                                   exc)

    def read_lines(self, max_lines: int | None = None,
                   skip_lines: int = 0) -> tuple[list, list]:
        inputs, results = [], []
        for k, (i, r) in enumerate(self):
            if k < skip_lines:
                continue
            if max_lines is not None and len(inputs) >= max_lines:
                break
            inputs.append(i)
            results.append(r)
        return inputs, results


def load_records(filename: str) -> Iterable[tuple[MeasureInput, MeasureResult]]:
    """``zip(inputs, results)`` of a record file."""
    return zip(*RecordReader(filename).read_lines()) if os.path.exists(filename) else zip()


def _target_kind(t: Any) -> str:
    return str(t).split()[0]


def _key_parts(key: str) -> tuple[str, tuple | None]:
    from .workload_registry import decode_workload_key

    return decode_workload_key(key)


def workload_distance_factor(target_key: str, cand_key: str) -> float:
    """1 for the same workload; the product of int ratios for a compatible one; inf otherwise."""
    h1, a1 = _key_parts(target_key)
    h2, a2 = _key_parts(cand_key)
    if h1 != h2 or a1 is None or a2 is None or len(a1) != len(a2):
        return float("inf") if target_key != cand_key else 1.0
    f = 1.0
    for x, y in zip(a1, a2):
        if isinstance(x, int) and isinstance(y, int):
            if x == 0 and y == 0:
                continue
            if x == 0 or y == 0 or x % y != 0:
                return float("inf")
            f *= x / y
        elif x != y:
            return float("inf")
    return f


def load_best_record(filename: str, workload_key: str | None = None, target: Any = None,
                     include_compatible: bool = False) -> tuple[Any, Any]:
    """The (input, result) with the smallest mean cost, or ``(None, None)``."""
    best, best_cost = (None, None), float("inf")
    for inp, res in RecordReader(filename):
        if res.error_no != 0:
            continue
        if target is not None and _target_kind(inp.task.target) != _target_kind(target):
            continue
        cost = res.mean_cost
        if workload_key is not None:
            f = workload_distance_factor(workload_key, inp.task.workload_key)
            if f == float("inf") or (f != 1.0 and not include_compatible):
                continue
            cost *= f
        if cost < best_cost:
            best, best_cost = (inp, res), cost
    return best


def distill_record_file(in_file: str, out_file: str | None = None) -> int:
    """Keep the best record per (target, workload key) of ``in_file`` (and ``out_file`` if it
    exists); rewrite ``out_file`` (default ``<in_file>.best.json``). Returns the number of
    records written."""
    in_file = str(in_file)
    out_file = str(out_file) if out_file else f"{in_file}.best.json"
    recs = list(RecordReader(in_file))
    if os.path.exists(out_file):
        recs = list(RecordReader(out_file)) + recs
    best: dict[tuple[str, str], tuple[Any, Any]] = {}
    for inp, res in recs:
        if res.error_no != 0:
            continue
        k = (str(inp.task.target), inp.task.workload_key)
        if k not in best or res.mean_cost < best[k][1].mean_cost:
            best[k] = (inp, res)
    lines: list[str] = []
    for inp, res in best.values():
        s = dump_record_to_string(inp, res)
        if s not in lines:
            lines.append(s)
    with open(out_file, "w", encoding="utf-8") as f:
        for s in lines:
            f.write(s + "\n")
    return len(lines)


def is_auto_scheduler_record_file(filename: str) -> bool:
    """True when the first record line of ``filename`` has the ``i``/``r`` keys."""
    with open(filename, encoding="utf-8") as f:
        for line in f:
            if line.strip() and line[0] not in "# ":
                try:
                    return "i" in json.loads(line)
                except ValueError:
                    return False
    return False


__all__ = ["MAX_FLOAT", "RecordToFile", "RecordReader", "load_records", "save_records",
           "load_best_record", "distill_record_file", "dump_record_to_string",
           "load_record_from_string"]
