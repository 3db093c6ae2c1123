"""``templtune report LOG... [-o report.html] [--png DIR]``: a tuning report.

One HTML page, figures inline, that opens offline: per task the best-so-far GFLOPS against
trials and wall time, the error codes over trials and the best config; for a log with several
tasks (a network), the estimated latency over trials and a per-task table. Plots need
matplotlib (``pip install 'templtune[plot]'``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from templtune.cli.main import CliError, command


def cmd_report(args: argparse.Namespace) -> int:
    from templtune.cli.report import ReportError, load_report_data, render_report

    out = Path(args.output)
    if not out.parent.is_dir():
        raise CliError(f"-o {args.output}: folder {out.parent} does not exist")
    try:
        data = load_report_data(args.logs)
        page, figures = render_report(data, png_dir=args.png)
    except ReportError as exc:
        raise CliError(str(exc)) from None
    out.write_text(page, encoding="utf-8")
    print(f"report: {out} ({len(data.tasks)} task(s), {len(figures)} figures)")
    if args.png:
        print(f"figures: {len(figures)} PNG files in {args.png}")
    return 0


@command("report", help="an HTML report (tuning curves, errors, per-task table) of tuning logs")
def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="AutoTVM or auto-scheduler logs (several are merged by time)")
    parser.add_argument("-o", "--output", default="report.html",
                        help="HTML file to write (default report.html)")
    parser.add_argument("--png", default=None, metavar="DIR",
                        help="also write each figure as a PNG file into DIR")
    parser.set_defaults(func=cmd_report)
