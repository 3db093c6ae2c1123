"""auto_scheduler records: TVM's v0.6 JSON lines with keys ``i``, ``r``, ``v``.

Hostile logs: the reader takes bytes and decodes each line on its own, so a non-UTF-8 byte costs
only its line; leading whitespace and a UTF-8 byte-order mark are tolerated; a line that fails to
decode for any reason is skipped with a ``file:line`` warning. Decoding is type-strict (costs,
``all_cost`` and the timestamp are JSON numbers, ``error_no`` a JSON integer) and best selection
takes only successful records with finite, positive costs (:func:`usable_cost`).
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# NOTE: one rule for which costs may compete, shared with AutoTVM's records
from templtune.autotvm.record import usable_cost
from templtune.target import kind_of

from .measure import MAX_FLOAT, MeasureInput, MeasureResult
from .transform_step import decode_step

logger = logging.getLogger("auto_scheduler")

AUTO_SCHEDULER_LOG_VERSION = "v0.6"
#: How many of the fastest records per workload best selection keeps as candidates, for when
#: the fastest does not fit the task (see :func:`check_steps`).
CANDIDATES = 16


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
    if getattr(res, "device", ""):
        rec["device"] = str(res.device)  # e.g. "emulator": CPU timings of a CUDA candidate
    return json.dumps(rec)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def load_record_from_string(line: str) -> tuple[MeasureInput, MeasureResult]:
    """Parse one line; accepts v0.1 ``[key, target]`` and v0.5 task arrays.

    Raises ``ValueError``/``TypeError`` (or another exception of the JSON decoder) on a
    malformed line."""
    rec = json.loads(line.lstrip("\ufeff \t"))
    if not isinstance(rec, dict):
        raise TypeError("an auto_scheduler record must be a JSON object")
    unknown = set(rec) - {"i", "r", "v", "checked", "infra_error", "device"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in auto_scheduler record")
    t = rec["i"][0]
    if not isinstance(t, list) or len(t) < 2 or not all(isinstance(x, str) for x in t[:2]):
        raise TypeError("the task must be [workload key, target, ...]")
    if len(t) > 3 and not isinstance(t[3], str):
        raise TypeError("target_host must be a string")
    if len(t) > 4 and not _is_int(t[4]):
        raise TypeError("layout_rewrite_option must be an integer")
    hw = tuple(t[2]) if len(t) > 2 else ()
    task = RecordTask(t[0], t[1], hw, t[3] if len(t) > 3 else "",
                      t[4] if len(t) > 4 else 0, tuple(t[5]) if len(t) > 5 else ())
    steps = tuple(decode_step(s) for s in rec["i"][1][1])
    r = rec["r"]
    if not isinstance(r, list) or len(r) < 4:
        raise TypeError("the result must be [costs, error_no, all_cost, timestamp]")
    if not isinstance(r[0], list) or not all(_is_number(c) for c in r[0]):
        raise TypeError(f"costs must be a list of numbers, got {str(r[0])[:80]}")
    if not _is_int(r[1]):
        raise TypeError(f"error_no must be an integer, got {str(r[1])[:80]!r}")
    if not (_is_number(r[2]) and _is_number(r[3])):
        raise TypeError("all_cost and timestamp must be numbers")
    # NOTE: float() of a huge JSON integer raises OverflowError: the line is skipped.
    device = rec.get("device", "")
    if not isinstance(device, str):
        raise TypeError("device must be a string")
    res = MeasureResult(tuple(float(c) for c in r[0]), r[1], "", float(r[2]), float(r[3]),
                        rec.get("checked", True) is not False, rec.get("infra_error") is True,
                        device)
    return MeasureInput(task, RecordState(steps)), res  # type: ignore[arg-type]  # duck-typed state


def save_records(filename: str, inputs: Iterable[MeasureInput],
                 results: Iterable[MeasureResult]) -> None:
    """Append records to ``filename`` (parent directories are created); a file whose last
    line is torn (no final ``\n``) first gets one."""
    d = os.path.dirname(os.path.abspath(filename))
    os.makedirs(d, exist_ok=True)
    from templtune.autotvm.record import ends_torn  # one definition for both log formats

    torn = ends_torn(filename)
    with open(filename, "a", encoding="utf-8") as f:
        if torn:
            # NOTE: end a torn last line so the first new record is not glued onto it.
            f.write("\n")
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
    """Reads a record file; skips comments and blank lines, and corrupt lines with a
    ``file:line`` warning (``skipped`` lists their line numbers after a full pass)."""

    def __init__(self, filename: str) -> None:
        self.filename = str(filename)
        self.skipped: list[int] = []
        if not os.path.exists(self.filename):
            logger.warning("record file %s does not exist", self.filename)

    def __iter__(self) -> Iterator[tuple[MeasureInput, MeasureResult]]:
        if not os.path.exists(self.filename):
            return
        self.skipped = []
        # NOTE: bytes, decoded per line: one non-UTF-8 byte must cost only its own line.
        with open(self.filename, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8").lstrip("\ufeff")
                    text = line.strip()
                    if not text or text[0] == "#":
                        continue
                    rec = load_record_from_string(text)
                except Exception as exc:  # noqa: BLE001 - no line may make the log unreadable
                    self.skipped.append(n)
                    kind = "truncated" if not raw.endswith(b"\n") else "corrupt"
                    logger.warning("%s:%d: skipping a %s record (%s: %s)", self.filename, n,
                                   kind, type(exc).__name__, str(exc)[:200])
                    continue
                yield rec

    def read_lines(self, max_lines: int | None = None,
                   skip_lines: int = 0) -> tuple[list, list]:
        inputs: list[MeasureInput] = []
        results: list[MeasureResult] = []
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
    return kind_of(t).name


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


def check_steps(dag: Any, steps: Iterable[Any]) -> str | None:
    """Why a record's steps do not fit ``dag`` (the task's compute), or None.

    The steps are replayed on the DAG's initial state; a step naming a stage or iterator that
    does not exist fails, and a split must name the extent of the iterator it splits (a record
    of another shape) with factors whose product does not exceed it."""
    from .steps_loop import SplitStep

    try:
        state = dag.get_init_state()
        for k, step in enumerate(steps):
            if isinstance(step, SplitStep):
                ext = state.stages[step.stage_id].iters[step.iter_id].range
                known = [x for x in step.lengths if x is not None]
                if ext is not None and step.extent is not None and ext != step.extent:
                    return f"step {k} splits an axis of {step.extent}, the task's is {ext}"
                if ext is not None and math.prod(known) > ext:
                    return f"step {k} splits an axis of {ext} into factors {list(known)}"
            state = step.apply_to_state(state)
    except Exception as exc:  # noqa: BLE001 - any failure to replay rejects the record
        return f"its steps do not replay ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def load_best_record(filename: str, workload_key: str | None = None, target: Any = None,
                     include_compatible: bool = False, dag: Any = None) -> tuple[Any, Any]:
    """The (input, result) with the smallest mean cost, or ``(None, None)``.

    Only usable costs compete (:func:`usable_cost`). With ``dag`` (the task's ComputeDAG), a
    record of the exact workload whose steps do not fit it (:func:`check_steps`) is skipped
    with a warning and the next-fastest one is taken."""
    def candidates() -> Iterator[tuple[float, int, Any, Any, bool]]:
        for n, (inp, res) in enumerate(RecordReader(filename)):
            cost = usable_cost(res)
            if cost is None:
                continue
            if target is not None and _target_kind(inp.task.target) != _target_kind(target):
                continue
            exact = True
            if workload_key is not None:
                f = workload_distance_factor(workload_key, inp.task.workload_key)
                if f == float("inf") or (f != 1.0 and not include_compatible):
                    continue
                cost *= f
                exact = f == 1.0
            yield cost, n, inp, res, exact

    # NOTE: the CANDIDATES fastest, in bounded memory; the first that fits wins.
    for _, _, inp, res, exact in heapq.nsmallest(CANDIDATES, candidates(), key=lambda c: c[:2]):
        why = check_steps(dag, inp.state.transform_steps) if dag is not None and exact \
            else None
        if why is None:
            return inp, res
        logger.warning("%s: ignoring a record of %s: %s", filename, inp.task.workload_key, why)
    return None, None


def dag_of_key(workload_key: str) -> Any:
    """The ComputeDAG of a logged workload key, or None when it is not registered here or its
    arguments exceed the bounds a log may make a reader build (at most 64 numbers, each at
    most 2^24 in magnitude)."""
    from .workload_registry import decode_workload_key, workload_key_to_tensors

    _, args = decode_workload_key(workload_key)
    ints = [a for a in (args or ()) if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if len(ints) > 64 or any(abs(a) > 1 << 24 for a in ints):
        return None
    try:
        from .compute_dag import ComputeDAG

        return ComputeDAG(workload_key_to_tensors(workload_key))
    except Exception:  # noqa: BLE001 - an unknown or failing workload: nothing to vet with
        return None


def distill_record_file(in_file: str, out_file: str | None = None) -> int:
    """Keep the best record per (target, workload key) of ``in_file`` (and ``out_file`` if it
    exists); rewrite ``out_file`` (default ``<in_file>.best.json``). Returns the number of
    records written.

    Only usable costs compete (:func:`usable_cost`); where the workload is registered here
    (:func:`dag_of_key`), a record whose steps do not fit it is passed over for the next one."""
    in_file = str(in_file)
    out_file = str(out_file) if out_file else f"{in_file}.best.json"
    recs = list(RecordReader(in_file))
    if os.path.exists(out_file):
        recs = list(RecordReader(out_file)) + recs
    groups: dict[tuple[str, str], list[tuple[float, int, Any, Any]]] = {}
    for n, (inp, res) in enumerate(recs):
        cost = usable_cost(res)
        if cost is None:
            continue
        k = (str(inp.task.target), inp.task.workload_key)
        groups.setdefault(k, []).append((cost, n, inp, res))
    lines: list[str] = []
    for (_, key), group in groups.items():
        dag = dag_of_key(key)
        for _, _, inp, res in heapq.nsmallest(CANDIDATES, group, key=lambda c: c[:2]):
            why = None if dag is None else check_steps(dag, inp.state.transform_steps)
            if why is None:
                s = dump_record_to_string(inp, res)
                if s not in lines:
                    lines.append(s)
                break
            logger.warning("%s: ignoring a record of %s: %s", in_file, key, why)
    with open(out_file, "w", encoding="utf-8") as f:
        for s in lines:
            f.write(s + "\n")
    return len(lines)


def is_auto_scheduler_record_file(filename: str) -> bool:
    """True when most JSON-object lines of ``filename`` have the ``i``/``r`` keys (not only
    the first: a corrupt or foreign first line must not decide the format)."""
    n_as = n_other = 0
    with open(filename, "rb") as f:
        for raw in f:
            text = raw.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
            if not text.startswith("{"):
                continue
            try:
                obj = json.loads(text)
            except Exception:  # noqa: BLE001 - any undecodable line is just not counted
                continue
            if isinstance(obj, dict) and "i" in obj and "r" in obj:
                n_as += 1
            elif isinstance(obj, dict):
                n_other += 1
    return n_as > n_other


__all__ = ["MAX_FLOAT", "RecordToFile", "RecordReader", "load_records", "save_records",
           "usable_cost", "check_steps",
           "load_best_record", "distill_record_file", "dump_record_to_string",
           "load_record_from_string"]


if __name__ == "__main__":
    # NOTE: ``python -m templtune.auto_scheduler.measure_record --mode distill --i log.json`` as
    # TVM's; the tool lives in measure_record_cli so that this module stays the library.
    from templtune.auto_scheduler.measure_record_cli import main as _main

    raise SystemExit(_main())
