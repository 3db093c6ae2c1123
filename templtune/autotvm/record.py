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

Hostile logs: no line can make a log unreadable. A line that fails to decode for *any* reason
(bad JSON, undecodable bytes, nesting deep enough to exhaust the recursion limit, numbers too
large for a float, wrong types) is skipped with a ``file:line`` warning. Decoding is type-strict:
costs, ``all_cost`` and the timestamp must be JSON numbers (not strings, not booleans) and
``error_no`` a JSON integer. Best selection additionally needs :func:`usable_cost` (finite,
positive costs of a successful record). Appending first ends a torn last line with ``\n``.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from templtune.autotvm.space import ConfigEntity
from templtune.autotvm.task.target_compat import as_target
from templtune.autotvm.task.task import serialize_args
from templtune.measure.measure import AUTOTVM_ERROR_COST

logger = logging.getLogger("autotvm.record")

__all__ = ["AUTOTVM_LOG_VERSION", "encode", "decode", "load_from_buffer", "load_from_file",
           "save_to_file", "append_records", "measure_str_key", "pick_best", "split_workload",
           "usable_cost", "ends_torn", "check_config", "args_within_bounds"]

AUTOTVM_LOG_VERSION = 0.2
ERROR_COST = AUTOTVM_ERROR_COST
_MAX_DETAIL = 1024
#: the largest thread count a record may name (a bigger one is a corrupt line, not a machine)
MAX_THREADS = 4096

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
    if getattr(result, "device", ""):
        row["device"] = str(result.device)
    if err == 0 and int(getattr(result, "threads", 0) or 0) > 0:
        row["threads"] = int(result.threads)
    return json.dumps(row)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _plain_args(x: Any) -> bool:
    """JSON scalars and lists only: workloads are dictionary keys (an object is unhashable)."""
    if isinstance(x, list):
        return all(_plain_args(a) for a in x)
    return x is None or isinstance(x, (str, int, float, bool))


def _device(x: Any) -> str:
    if not isinstance(x, str):
        raise TypeError(f"device must be a string, got {_short(x)}")
    return x


def _threads(x: Any) -> int:
    if not _is_int(x) or not 0 < x <= MAX_THREADS:
        raise ValueError(f"threads must be an integer in 1..{MAX_THREADS}, got {_short(x)}")
    return int(x)


def _finite(x: float, what: str) -> float:
    if not math.isfinite(x):
        raise ValueError(f"{what} is not finite ({x})")
    return x


def _short(x: Any, width: int = 80) -> str:
    s = repr(x)
    return s if len(s) <= width else s[:width - 3] + "..."


def usable_cost(res: Any) -> float | None:
    """The mean cost of a record that may win best selection, else None.

    Only a successful record (``error_no == 0``) whose costs are all finite and positive
    qualifies: a NaN, infinite, zero or negative cost is nonsense a log must not be able to
    make "best".
    """
    err = getattr(res, "error_no", None)
    if isinstance(err, bool) or not isinstance(err, int) or int(err) != 0:
        return None
    costs = tuple(getattr(res, "costs", ()) or ())
    if not costs or not all(_is_number(c) and math.isfinite(c) and c > 0 for c in costs):
        return None
    return float(sum(costs) / len(costs))


def usable_records(pairs: Iterable[tuple[Any, Any]], include_emulated: bool | None = None
                   ) -> Iterator[tuple[Any, Any, float]]:
    """``(input, result, mean cost)`` of each record of ``pairs`` that may compete for best
    (see :func:`usable_cost`). Records timed on the CPU CUDA emulator count only where
    ``use_emulated_records(include_emulated)`` allows (decided at the first one, which probes
    CUDA); those left out are counted in one warning once ``pairs`` is exhausted."""
    skipped = 0
    use_emulated: bool | None = None
    for inp, res in pairs:
        cost = usable_cost(res)
        if cost is None:
            continue
        if getattr(res, "device", "") == "emulator":
            if use_emulated is None:
                from templtune.runtime.cuda.backend import use_emulated_records

                use_emulated = use_emulated_records(include_emulated)
            if not use_emulated:
                skipped += 1
                continue
        yield inp, res, cost
    if skipped:
        logger.warning("ignored %d records timed on the CPU CUDA emulator (CPU timings; "
                       "include_emulated=True uses them)", skipped)


def check_config(space: Any, config: Any) -> str | None:
    """Why ``config`` (from a record) cannot be used with the task's ``space``, or None.

    Every knob of the space must be present with an entity of the same kind that the knob
    could have produced (a split whose factors multiply to the axis, a choice the knob offers);
    a record that fails this would otherwise reach the user's build as a KeyError or a wrong
    loop nest.
    """
    ents = getattr(config, "_entity_map", None)
    if ents is None:
        return f"{type(config).__name__} has no knobs"
    for name, knob in getattr(space, "space_map", {}).items():
        ent = ents.get(name)
        if ent is None:
            return f"knob {name!r} is missing"
        options = list(knob.entities)
        if not options:
            return f"knob {name!r} has no choices in the space"
        if type(ent) is not type(options[0]):
            return (f"knob {name!r} has kind {getattr(ent, 'kind', '?')!r}, the space's is "
                    f"{options[0].kind!r}")
        if ent not in options:
            return f"knob {name!r} = {ent!r} is not a choice of the space ({knob!r})"
    return None


#: Bounds on the arguments of a logged workload that readers may re-create (run its template
#: on): config-space construction costs about the square root of an axis length per axis, so
#: a log naming an axis of 10^18 must not get its template run.
MAX_ARG_INT = 1 << 24
MAX_ARG_INTS = 64


def args_within_bounds(args: Any) -> bool:
    """Whether a logged workload's arguments are small enough to re-create its task from
    (at most :data:`MAX_ARG_INTS` numbers, each at most :data:`MAX_ARG_INT` in magnitude)."""
    ints: list[int | float] = []

    def walk(x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            return all(walk(a) for a in x)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            ints.append(x)  # a float may become a dimension too
            return abs(x) <= MAX_ARG_INT and len(ints) <= MAX_ARG_INTS
        return True

    return walk(args)


def decode(row: str, protocol: str = "json") -> Record | None:
    """Parse one log line into ``(MeasureInput, MeasureResult)``.

    Returns None for a row of the unsupported 0.1 format. Raises ``ValueError`` (or
    ``KeyError``/``TypeError``) on a malformed row.
    """
    return _decode(row, protocol, {})


def _decode(row: str, protocol: str, targets: dict[str, Any]) -> Record | None:
    from templtune.autotvm.measure.candidate import MeasureInput
    from templtune.autotvm.task.task import Task
    from templtune.measure.measure import MeasureResult

    if protocol != "json":
        raise ValueError(f"unsupported record protocol {protocol!r} (only 'json')")
    obj = json.loads(row)
    if not isinstance(obj, dict):
        raise ValueError("a record must be a JSON object")
    if "v" in obj and obj["v"] == 0.1:
        return None
    tgt_str, name, args, _kwargs = obj["input"]
    if not isinstance(tgt_str, str) or not isinstance(name, str) or not isinstance(args, list):
        raise TypeError("input must be [target string, task name, [args], {}]")
    if "-target" in tgt_str:
        logger.warning("'-target' in a logged target string is deprecated; read as '-mtriple'")
        tgt_str = tgt_str.replace("-target", "-mtriple")
    if not isinstance(tgt_str, str) or not isinstance(name, str) or not isinstance(args, list):
        raise TypeError("input must be [target string, task name, [args], {}]")
    if not _plain_args(args):
        raise TypeError("task arguments must be numbers, strings, null or lists of them")
    task = Task(name, serialize_args(args))
    if not isinstance(obj["config"], dict) or not _is_int(obj["config"].get("index")):
        raise TypeError("config must be an object with an integer index")
    config = ConfigEntity.from_json_dict(obj["config"])
    costs, error_no, all_cost, timestamp = obj["result"]
    if not isinstance(costs, list) or not all(_is_number(c) for c in costs):
        raise TypeError(f"costs must be a list of numbers, got {_short(costs)}")
    if not _is_int(error_no):
        raise TypeError(f"error_no must be an integer, got {_short(error_no)}")
    if not (_is_number(all_cost) and _is_number(timestamp)):
        raise TypeError("all_cost and timestamp must be numbers")
    # NOTE: float() of a huge JSON integer raises OverflowError: the line is skipped.
    res = MeasureResult(tuple(float(c) for c in costs), error_no, float(all_cost),
                        _finite(float(timestamp), "timestamp"),
                        str(obj.get("error_detail", "")),
                        obj.get("checked", True) is not False, obj.get("infra_error") is True,
                        _device(obj.get("device", "")),
                        _threads(obj["threads"]) if "threads" in obj else 0)
    config.cost = sum(res.costs) / len(res.costs) if res.costs else float("inf")
    # NOTE: target strings repeat on every line; parse each once per loader.
    target = targets.get(tgt_str)
    if target is None:
        target = targets[tgt_str] = as_target(tgt_str)
    task.target = target
    return MeasureInput(target, task, config), res


def load_from_buffer(stream: IO[str], name: str | None = None,
                     skipped: list[int] | None = None) -> Iterator[Record]:
    """Yield records from a text stream; blank lines and ``#`` comments are skipped, corrupt
    lines are skipped with a warning naming ``name:line`` (and their numbers appended to
    ``skipped`` when given)."""
    name = name or getattr(stream, "name", "<stream>")
    old = 0
    targets: dict[str, Any] = {}
    for lineno, line in enumerate(stream, 1):
        text = line.lstrip("\ufeff").strip()
        if not text or text.startswith("#"):
            continue
        try:
            rec = _decode(text, "json", targets)
        except Exception as err:  # noqa: BLE001 - no line may make the log unreadable
            kind = "truncated" if not line.endswith("\n") else "corrupt"
            logger.warning("%s:%d: skipping %s record (%s: %s)", name, lineno, kind,
                           type(err).__name__, _short(str(err), 200))
            if skipped is not None:
                skipped.append(lineno)
            continue
        if rec is None:
            old += 1
            continue
        yield rec
    if old:
        logger.warning("%s: skipped %d records of the unsupported log format 0.1", name, old)


def load_from_file(path: str | os.PathLike[str], skipped: list[int] | None = None
                   ) -> Iterator[Record]:
    """Yield the records of a log file (see :func:`load_from_buffer`); undecodable bytes
    become U+FFFD, so they cost at most their own line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from load_from_buffer(f, os.fspath(path), skipped)


def ends_torn(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists, is not empty and does not end in ``\n`` (a torn last line,
    e.g. from a full disk or a killed writer)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append_records(file_out: str | os.PathLike[str] | IO[str], records: Iterable[Record]) -> int:
    """Append records to a log and make them durable; returns the number written.

    For a path, the file is opened in append mode, each line goes out in one ``write`` (so a
    killed run leaves only whole lines) and the batch ends with ``fsync``. For an open text
    file, lines are written and the file is flushed. Either way, a file whose last line is
    torn (no final ``\n``) first gets one.
    """
    lines = [(encode(inp, res) + "\n") for inp, res in records]
    if hasattr(file_out, "write"):
        f: Any = file_out
        name = getattr(f, "name", None)
        if isinstance(name, str) and os.path.isfile(name) and lines:
            f.flush()
            if ends_torn(name):
                f.write("\n")
        for line in lines:
            f.write(line)
        f.flush()
        try:
            os.fsync(f.fileno())
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            pass
        return len(lines)
    torn = ends_torn(file_out)
    fd = os.open(os.fspath(file_out), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        if torn:
            # NOTE: end the torn line so the first new record is not glued onto it.
            _write_all(fd, b"\n")
        for line in lines:
            _write_all(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(lines)


def _default_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0o666 less the process umask."""
    mask = os.umask(0o022)  # NOTE: the umask can only be read by setting it; restored at once
    os.umask(mask)
    return 0o666 & ~mask


def save_to_file(records: Iterable[Record], path: str | os.PathLike[str]) -> int:
    """Write records to ``path``, replacing it atomically; returns the number written. The
    file gets the mode of the one it replaces, else the user's umask (as ``open`` would)."""
    path = Path(path)
    mode = path.stat().st_mode & 0o7777 if path.exists() else _default_file_mode()
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent or ".")
    try:
        os.fchmod(fd, mode)  # mkstemp creates 0600
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
    in their original order, each once. Returns the number of records written.

    Only usable costs compete (:func:`usable_cost`); where the template is registered and the
    arguments are within :func:`args_within_bounds`, a winner whose config does not fit the
    task's space is replaced by the next-fastest record that does."""
    from templtune.autotvm.history import ApplyHistoryBest

    out = Path(out_file) if out_file is not None else Path(f"{os.fspath(in_file)}.best.log")
    recs = list(load_from_file(in_file))
    if out.exists():
        recs += list(load_from_file(out))
    ctx = ApplyHistoryBest(recs)
    # NOTE: vet each winner against its task's space (as a query would) where the logged
    # arguments are small enough to re-create the task from (args_within_bounds).
    for table in (ctx.best_by_model, ctx.best_by_targetkey):
        for key, (inp, _) in list(table.items()):
            if args_within_bounds(inp.task.args):
                ctx._best(table, key, inp.target, key[1])
    best = {measure_str_key(inp) for inp, _ in ctx.best_by_model.values()}
    best |= {measure_str_key(inp) for inp, _ in ctx.best_by_targetkey.values()}
    picked, written = [], set()
    for inp, res in recs:
        skey = measure_str_key(inp)
        if skey in best and skey not in written:
            written.add(skey)
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


if __name__ == "__main__":
    # NOTE: ``python -m templtune.autotvm.record --mode pick --i in.log`` as TVM's; the tool
    # lives in record_cli so that this module stays the library reader/writer.
    from templtune.autotvm.record_cli import main as _main

    raise SystemExit(_main())
