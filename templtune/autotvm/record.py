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

This module reads and writes log files and holds the log tools (:func:`pick_best`,
:func:`split_workload`); one line's encoding and decoding live in ``record_codec.py``, the checks
on decoded records in ``record_checks.py``. Every name stays importable from here.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

# NOTE: the names that moved out stay importable from here (TVM's path, users, tests).
from templtune.autotvm.record_checks import MAX_ARG_INT as MAX_ARG_INT
from templtune.autotvm.record_checks import MAX_ARG_INTS as MAX_ARG_INTS
from templtune.autotvm.record_checks import (
    args_within_bounds,
    check_config,
    usable_cost,
)
from templtune.autotvm.record_checks import usable_records as usable_records
from templtune.autotvm.record_codec import _MAX_DETAIL as _MAX_DETAIL
from templtune.autotvm.record_codec import (
    AUTOTVM_LOG_VERSION,
    Record,
    _decode,
    _short,
    decode,
    encode,
)
from templtune.autotvm.record_codec import ERROR_COST as ERROR_COST
from templtune.autotvm.record_codec import MAX_THREADS as MAX_THREADS
from templtune.autotvm.record_codec import _device as _device
from templtune.autotvm.record_codec import _finite as _finite
from templtune.autotvm.record_codec import _is_int as _is_int
from templtune.autotvm.record_codec import _is_number as _is_number
from templtune.autotvm.record_codec import _json_arg as _json_arg
from templtune.autotvm.record_codec import _plain_args as _plain_args
from templtune.autotvm.record_codec import _threads as _threads
from templtune.autotvm.record_codec import _version as _version

logger = logging.getLogger("autotvm.record")

__all__ = ["AUTOTVM_LOG_VERSION", "encode", "decode", "load_from_buffer", "load_from_file",
           "save_to_file", "append_records", "measure_str_key", "pick_best", "split_workload",
           "usable_cost", "ends_torn", "check_config", "args_within_bounds"]


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
