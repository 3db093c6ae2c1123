"""``templtune log read|pick|distill|split``: inspect and transform AutoTVM tuning logs.

* ``read LOG [--begin B] [--end E]``: a table of the records;
* ``pick LOG [-o OUT]``: keep the best record per (target key, workload); default output
  ``LOG.best.log``;
* ``distill LOG [-o OUT]``: the same for AutoTVM logs (TVM's auto_scheduler name for it);
* ``split LOG [--out-dir D] [--no-clean]``: one file per workload, ``LOG.NNN.wkl``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from templtune.cli.log_format import LogFormat, require_format, skipped_note
from templtune.cli.main import CliError, command

logger = logging.getLogger("templtune.cli")


def _existing(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CliError(f"no such log file: {path}")
    if p.is_dir():
        raise CliError(f"{path} is a directory, not a log file")
    return p


def _short(x: Any, width: int) -> str:
    s = str(x)
    return s if len(s) <= width else s[: width - 3] + "..."


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _when(timestamp: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
    except (OverflowError, OSError, ValueError):  # a timestamp no calendar holds
        return "?"


def cmd_read(args: argparse.Namespace) -> int:
    from templtune.autotvm.record import load_from_file, usable_cost

    path = _existing(args.log)
    if args.begin < 0 or (args.end is not None and args.end < args.begin):
        raise CliError(f"bad record range --begin {args.begin} --end {args.end}")
    require_format(path, (LogFormat.AUTOTVM,), "log read")
    rows, n, n_err = [], 0, 0
    skipped: list[int] = []
    cands: dict[tuple, list[tuple[float, int, Any, Any]]] = {}
    for i, (inp, res) in enumerate(load_from_file(path, skipped)):
        n += 1
        ok = int(res.error_no) == 0
        mean = sum(res.costs) / len(res.costs) if res.costs else float("nan")
        usable = usable_cost(res)
        if usable is not None:
            key = (str(inp.target), inp.task.name, repr(inp.task.args))
            cands.setdefault(key, []).append((usable, i, inp, res))
        n_err += not ok
        if i < args.begin or (args.end is not None and i >= args.end):
            continue
        rows.append([
            str(i), _short(inp.target, 24), _short(inp.task.name, 32),
            _short(inp.task.args, 40), str(inp.config.index),
            f"{mean * 1e3:.4f}" if ok else "-",
            "" if ok else res.error_no.name,
            _when(res.timestamp),
        ])
    print(_table(rows, ["#", "target", "task", "args", "config", "cost(ms)", "error", "time"]))
    summary = f"{n} records, {n_err} failed"
    best = _vetted_best(cands)
    if best is not None:
        summary += f", best {best * 1e3:.4f} ms"
    print(summary)
    if skipped:
        logger.warning("%s", skipped_note(path, skipped))
    return 0


def _vetted_best(cands: dict[tuple, list[tuple[float, int, Any, Any]]]) -> float | None:
    """The smallest cost among records that fit their task's space (see ``templtune best``)."""
    from templtune.cli.best_cmd import TaskCache, pick_fitting
    from templtune.cli.tune_cmd import load_templates

    if not cands:
        return None
    load_templates()
    tasks = TaskCache()
    costs = [hit[0] for group in cands.values()
             if (hit := pick_fitting(group, tasks.get(group[0][2]))) is not None]
    return min(costs) if costs else None


def cmd_pick(args: argparse.Namespace) -> int:
    from templtune.autotvm.record import pick_best

    path = _existing(args.log)
    fmt = require_format(path, (LogFormat.AUTOTVM, LogFormat.AUTO_SCHEDULER), "log pick").format
    if fmt is LogFormat.AUTO_SCHEDULER:
        # NOTE: imported here: the auto-scheduler is a heavier, optional part of the CLI.
        from templtune.auto_scheduler.measure_record import distill_record_file

        out_as = args.output or f"{path}.best.json"
        n = distill_record_file(str(path), out_as)
        print(f"wrote {n} best records to {out_as}")
        return 0
    out = Path(args.output) if args.output else Path(f"{path}.best.log")
    n = pick_best(path, out)
    print(f"wrote {n} best records to {out}")
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    from templtune.autotvm.record import split_workload

    path = _existing(args.log)
    require_format(path, (LogFormat.AUTOTVM,), "log split")
    out = split_workload(path, clean=not args.no_clean, out_dir=args.out_dir)
    for p, n in out:
        print(f"{p}: {n} records")
    print(f"{len(out)} workloads")
    return 0


@command("log", help="inspect and transform AutoTVM tuning logs")
def setup(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="log_command", metavar="{read,pick,distill,split}")
    sub.required = True
    p = sub.add_parser("read", help="print the records of a log as a table")
    p.add_argument("log", help="AutoTVM JSON-lines log")
    p.add_argument("--begin", type=int, default=0, help="first record to show (default 0)")
    p.add_argument("--end", type=int, default=None, help="stop before this record (default: all)")
    p.set_defaults(func=cmd_read)
    for name, text in (("pick", "keep the best record per (target, workload)"),
                       ("distill", "alias of pick for AutoTVM logs")):
        p = sub.add_parser(name, help=text)
        p.add_argument("log", help="AutoTVM JSON-lines log")
        p.add_argument("-o", "--output", default=None, help="output file (default LOG.best.log)")
        p.set_defaults(func=cmd_pick)
    p = sub.add_parser("split", help="write one log file per workload")
    p.add_argument("log", help="AutoTVM JSON-lines log")
    p.add_argument("--out-dir", default=None, help="output folder (default: the log's folder)")
    p.add_argument("--no-clean", action="store_true", help="keep duplicate records")
    p.set_defaults(func=cmd_split)
