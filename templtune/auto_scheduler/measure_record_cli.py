"""``python -m templtune.auto_scheduler.measure_record``: TVM's auto_scheduler log tool.

``--mode distill`` (the only mode, and the default) keeps the best record per (target,
workload) of ``--i`` and writes them to ``--o`` (default ``<i>.best.json``), merging what ``--o``
already holds.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]

logger = logging.getLogger("auto_scheduler")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m templtune.auto_scheduler.measure_record",
                                description="Distill an auto_scheduler log to its best records.")
    p.add_argument("--mode", choices=["distill"], default="distill")
    p.add_argument("--i", "-i", type=str, help="input file")
    p.add_argument("--o", "-o", type=str, default=None, help="output file (default <i>.best.json)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.i is None:
        parser.error("--i (the input log) is required")
    # NOTE: a program entry point, so it may configure logging (TVM's tool logs at INFO).
    logging.basicConfig()
    logger.setLevel(logging.INFO)
    from templtune.auto_scheduler.measure_record import distill_record_file

    out = args.o or args.i + ".best.json"
    n = distill_record_file(args.i, out)
    logger.info("Extract %d best records from %s to %s", n, args.i, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
