"""``templtune auto-scheduler distill|best``: auto_scheduler (v0.6 ``i``/``r``/``v``) logs."""

from __future__ import annotations

import argparse
from pathlib import Path

from .main import CliError, command


def cmd_distill(args: argparse.Namespace) -> int:
    from templtune.auto_scheduler.measure_record import distill_record_file

    from .log_format import LogFormat, require_format

    path = Path(args.log)
    if not path.is_file():
        raise CliError(f"{path}: no such log file")
    require_format(path, (LogFormat.AUTO_SCHEDULER,), "auto-scheduler distill")
    out = args.output or f"{path}.best.json"
    n = distill_record_file(str(path), out)
    print(f"wrote {n} best records to {out}")
    return 0


@command("auto-scheduler", help="transform auto_scheduler tuning logs")
def setup(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="as_command", metavar="{distill}")
    sub.required = True
    p = sub.add_parser("distill", help="keep the best record per (target, workload)")
    p.add_argument("log", help="auto_scheduler JSON-lines log")
    p.add_argument("-o", "--output", default=None, help="output file (default LOG.best.json)")
    p.set_defaults(func=cmd_distill)
