"""Which kind of tuning log a file is, decided from all of its lines.

Every CLI log command (``log read|pick|distill|split``, ``best``, ``auto-scheduler distill``)
surveys its input first, so that a log of the other kind is named as such (one clear error, not
one "skipping corrupt record" warning per line) and the format is not guessed from the first JSON
line alone: a stray or corrupt first line does not decide it. The survey reads bytes and decodes
each line on its own, so no line (bad bytes, deep nesting, a huge number) can stop it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path

from templtune.cli.main import CliError

__all__ = ["LogFormat", "LogSurvey", "survey", "require_format", "skipped_note"]


class LogFormat(enum.Enum):
    """The kind of records a log holds."""

    AUTOTVM = "AutoTVM"
    AUTO_SCHEDULER = "auto-scheduler"
    EMPTY = "empty"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class LogSurvey:
    """What :func:`survey` found: the format and, per kind, how many record lines.

    ``other_lines`` are the (1-based) numbers of non-blank, non-comment lines that are records
    of neither kind."""

    path: Path
    format: LogFormat
    n_autotvm: int
    n_auto_scheduler: int
    other_lines: tuple[int, ...]

    def describe(self) -> str:
        """``"an auto-scheduler log (40 auto-scheduler records, 1 AutoTVM record)"``-style."""
        parts = [f"{self.n_auto_scheduler} auto-scheduler", f"{self.n_autotvm} AutoTVM"]
        if self.format is LogFormat.AUTOTVM:
            parts.reverse()
        counts = ", ".join(f"{p} record{'s' if p.split()[0] != '1' else ''}" for p in parts)
        if self.other_lines:
            counts += f", {len(self.other_lines)} unreadable line(s)"
        kind = {LogFormat.AUTOTVM: "an AutoTVM log", LogFormat.AUTO_SCHEDULER:
                "an auto-scheduler log", LogFormat.EMPTY: "an empty log",
                LogFormat.UNKNOWN: "not a tuning log"}[self.format]
        return f"{kind} ({counts})"


def _kind(raw: bytes) -> str | None:
    """``"autotvm"``, ``"as"``, ``"other"``, or None for a blank or comment line."""
    try:
        text = raw.decode("utf-8").lstrip("\ufeff").strip()
    except UnicodeDecodeError:
        return "other"
    if not text or text.startswith("#"):
        return None
    if not text.startswith("{"):
        return "other"
    try:
        obj = json.loads(text)
    except Exception:  # noqa: BLE001 - RecursionError, ValueError, ...: just not a record
        return "other"
    if not isinstance(obj, dict):
        return "other"
    if "input" in obj and "result" in obj:
        return "autotvm"
    if "i" in obj and "r" in obj:
        return "as"
    return "other"


def survey(path: str | Path) -> LogSurvey:
    """Classify every line of ``path``; the format is the kind with more record lines."""
    path = Path(path)
    n_tvm = n_as = 0
    other: list[int] = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            kind = _kind(raw)
            if kind == "autotvm":
                n_tvm += 1
            elif kind == "as":
                n_as += 1
            elif kind == "other":
                other.append(n)
    if n_tvm > n_as:
        fmt = LogFormat.AUTOTVM
    elif n_as > n_tvm:
        fmt = LogFormat.AUTO_SCHEDULER
    else:
        fmt = LogFormat.UNKNOWN if other or n_tvm else LogFormat.EMPTY
    return LogSurvey(path, fmt, n_tvm, n_as, tuple(other))


def require_format(path: str | Path, allowed: tuple[LogFormat, ...], command: str) -> LogSurvey:
    """The survey of ``path``; raises :class:`CliError` naming the format when it is not one of
    ``allowed`` (an empty log is always allowed: commands report 0 records)."""
    s = survey(path)
    if s.format in allowed or s.format is LogFormat.EMPTY:
        return s
    wanted = " or ".join(f.value for f in allowed)
    hint = ""
    if s.format is LogFormat.AUTO_SCHEDULER:
        hint = "; for auto-scheduler logs use 'templtune log pick' or 'templtune auto-scheduler " \
               "distill'"
    elif s.format is LogFormat.AUTOTVM:
        hint = "; for AutoTVM logs use 'templtune log pick'"
    raise CliError(f"{path} is {s.describe()}: '{command}' reads {wanted} logs{hint}")


def skipped_note(path: str | Path, lines: list[int] | tuple[int, ...], limit: int = 10) -> str:
    """A line naming the skipped line numbers of ``path`` (empty when there are none)."""
    if not lines:
        return ""
    shown = ", ".join(str(n) for n in lines[:limit])
    more = f", ... ({len(lines)} in all)" if len(lines) > limit else ""
    return f"skipped {len(lines)} unreadable line(s) of {path}: {shown}{more}"
