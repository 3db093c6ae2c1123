"""AutoTVM tuning records: one JSON object per line, in TVM's schema (SPEC §4.1).

::

    {"input": [<target str>, <task name>, <args>, {}],
     "config": {"index": 9, "code_hash": null, "entity": [["tile_y", "sp", [-1, 2]], ...]},
     "result": [[<costs>], <error_no>, <all_cost>, <timestamp>],
     "version": 0.2, "tvm_version": "<templtune version>"}

Failed measurements are written with costs ``[1e9]``. Deviations from TVM, all compatible with
TVM's reader: a failed record may carry an extra trailing key ``"error_detail"`` (the error text,
at most 1024 characters; TVM loses it); the loaders skip blank lines, and skip a corrupt or
truncated line with a warning naming the file and line number instead of raising.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from templtune.autotvm.space import ConfigEntity
from templtune.autotvm.task.target_compat import as_target
from templtune.autotvm.task.task import serialize_args
from templtune.measure.measure import AUTOTVM_ERROR_COST

logger = logging.getLogger("templtune.autotvm.record")

__all__ = ["AUTOTVM_LOG_VERSION", "encode", "decode", "load_from_buffer", "load_from_file",
           "save_to_file", "append_records", "measure_str_key", "pick_best", "split_workload"]

AUTOTVM_LOG_VERSION = 0.2
ERROR_COST = AUTOTVM_ERROR_COST
_MAX_DETAIL = 1024

Record = tuple[Any, Any]


def _version() -> str:
    from templtune import __version__

    return str(__version__)


def _json_arg(x: Any) -> Any:
    """JSON form of :func:`serialize_args`'s output (symbolic vars as their names)."""
    if isinstance(x, tuple):
        return [_json_arg(a) for a in x]
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    return str(x)


def encode(inp: Any, result: Any, protocol: str = "json") -> str:
    """One log line (without the newline) for a measurement."""
    if protocol != "json":
        raise ValueError(f"unsupported record protocol {protocol!r} (only 'json'; no pickle)")
    err = int(result.error_no)
    costs = [ERROR_COST] if err != 0 else [float(c) for c in result.costs]
    row: dict[str, Any] = {
        "input": [str(inp.target), inp.task.name, _json_arg(serialize_args(inp.task.args)),
                  dict(getattr(inp.task, "kwargs", {}) or {})],
        "config": inp.config.to_json_dict(),
        "result": [costs, err, float(result.all_cost), float(result.timestamp)],
        "version": AUTOTVM_LOG_VERSION,
        "tvm_version": _version(),
    }
    detail = getattr(result, "error_detail", "")
    if err != 0 and detail:
        row["error_detail"] = str(detail)[:_MAX_DETAIL]
    if not getattr(result, "checked", True):
        row["checked"] = False
    if getattr(result, "infra_error", False):
        row["infra_error"] = True
    return json.dumps(row)


def decode(row: str, protocol: str = "json") -> Record | None:
    """Parse one log line into ``(MeasureInput, MeasureResult)``.

    Returns None for a row of the unsupported 0.1 format. Raises ``ValueError`` (or
    ``KeyError``/``TypeError``) on a malformed row.
    """
    return _decode(row, protocol, {})


def _decode(row: str, protocol: str, targets: dict[str, Any]) -> Record | None:
    from templtune.autotvm.measure import MeasureInput, MeasureResult
    from templtune.autotvm.task.task import Task

    if protocol != "json":
        raise ValueError(f"unsupported record protocol {protocol!r} (only 'json')")
    obj = json.loads(row)
    if not isinstance(obj, dict):
        raise ValueError("a record must be a JSON object")
    if "v" in obj and obj["v"] == 0.1:
        return None
    tgt_str, name, args, _kwargs = obj["input"]
    if "-target" in tgt_str:
        logger.warning("'-target' in a logged target string is deprecated; read as '-mtriple'")
        tgt_str = tgt_str.replace("-target", "-mtriple")
    task = Task(str(name), serialize_args(args))
    config = ConfigEntity.from_json_dict(obj["config"])
    costs, error_no, all_cost, timestamp = obj["result"]
    res = MeasureResult(tuple(float(c) for c in costs), int(error_no), float(all_cost),
                        float(timestamp), str(obj.get("error_detail", "")),
                        obj.get("checked", True) is not False, obj.get("infra_error") is True)
    config.cost = sum(res.costs) / len(res.costs) if res.costs else float("inf")
    # NOTE: target strings repeat on every line; parse each once per loader.
    target = targets.get(tgt_str)
    if target is None:
        target = targets[tgt_str] = as_target(tgt_str)
    task.target = target
    return MeasureInput(target, task, config), res


def load_from_buffer(stream: IO[str], name: str | None = None) -> Iterator[Record]:
    """Yield records from a text stream; blank lines and ``#`` comments are skipped, corrupt
    lines are skipped with a warning naming ``name:line``."""
    name = name or getattr(stream, "name", "<stream>")
    old = 0
    targets: dict[str, Any] = {}
    for lineno, line in enumerate(stream, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            rec = _decode(text, "json", targets)
        except (ValueError, KeyError, TypeError, IndexError) as err:
            kind = "truncated" if not line.endswith("\n") else "corrupt"
            logger.warning("%s:%d: skipping %s record (%s: %s)", name, lineno, kind,
                           type(err).__name__, err)
            continue
        if rec is None:
            old += 1
            continue
        yield rec
    if old:
        logger.warning("%s: skipped %d records of the unsupported log format 0.1", name, old)


def load_from_file(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Yield the records of a log file (see :func:`load_from_buffer`)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from load_from_buffer(f, os.fspath(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append_records(file_out: str | os.PathLike[str] | IO[str], records: Iterable[Record]) -> int:
    """Append records to a log and make them durable; returns the number written.

    For a path, the file is opened in append mode, each line goes out in one ``write`` (so a
    killed run leaves only whole lines) and the batch ends with ``fsync``. For an open text
    file, lines are written and the file is flushed.
    """
    lines = [(encode(inp, res) + "\n") for inp, res in records]
    if hasattr(file_out, "write"):
        f: Any = file_out
        for line in lines:
            f.write(line)
        f.flush()
        try:
            os.fsync(f.fileno())
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            pass
        return len(lines)
    fd = os.open(os.fspath(file_out), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for line in lines:
            _write_all(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(lines)


def save_to_file(records: Iterable[Record], path: str | os.PathLike[str]) -> int:
    """Write records to ``path``, replacing it atomically; returns the number written."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            n = 0
            for inp, res in records:
                f.write(encode(inp, res) + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def measure_str_key(inp: Any, include_config: bool = True) -> str:
    """A string identifying a measurement input (target, task, args and, optionally, config)."""
    key = f"{inp.target}{inp.task.name}{inp.task.args}{inp.task.kwargs}"
    return key + str(inp.config) if include_config else key


def pick_best(in_file: str | os.PathLike[str], out_file: str | os.PathLike[str] | None = None
              ) -> int:
    """Keep the best record per (target key or model, workload) of ``in_file`` (plus
    ``out_file`` if it exists) and write them to ``out_file`` (default ``<in_file>.best.log``),
    in their original order, each once. Returns the number of records written."""
    from templtune.autotvm.dispatcher import ApplyHistoryBest

    out = Path(out_file) if out_file is not None else Path(f"{os.fspath(in_file)}.best.log")
    recs = list(load_from_file(in_file))
    if out.exists():
        recs += list(load_from_file(out))
    ctx = ApplyHistoryBest(recs)
    best = {measure_str_key(inp) for inp, _ in ctx.best_by_model.values()}
    best |= {measure_str_key(inp) for inp, _ in ctx.best_by_targetkey.values()}
    picked, written = [], set()
    for inp, res in recs:
        key = measure_str_key(inp)
        if key in best and key not in written:
            written.add(key)
            picked.append((inp, res))
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_to_file(picked, out)


def split_workload(in_file: str | os.PathLike[str], clean: bool = True,
                   out_dir: str | os.PathLike[str] | None = None) -> list[tuple[Path, int]]:
    """Write one file per workload, ``<in_file name>.<NNN>.wkl`` (in ``out_dir``, default the
    input's folder), in first-seen order. With ``clean``, exact duplicate inputs keep their first
    record. Returns ``[(path, n_records), ...]``."""
    groups: dict[str, list[Record]] = {}
    for inp, res in load_from_file(in_file):
        groups.setdefault(measure_str_key(inp, False), []).append((inp, res))
    src = Path(in_file)
    dest = Path(out_dir) if out_dir is not None else src.parent
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i, recs in enumerate(groups.values()):
        if clean:
            seen: set[str] = set()
            kept = []
            for inp, res in recs:
                k = measure_str_key(inp)
                if k not in seen:
                    seen.add(k)
                    kept.append((inp, res))
            recs = kept
        path = dest / f"{src.name}.{i:03d}.wkl"
        out.append((path, save_to_file(recs, path)))
    return out
