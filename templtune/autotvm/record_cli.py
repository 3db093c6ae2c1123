"""``python -m templtune.autotvm.record``: TVM's record tool (``python -m tvm.autotvm.record``).

``--mode read`` (default) prints records ``[--begin, --end)`` (target, task, config, result; with
``--ir`` the lowered loop IR, with ``--code`` the generated source); ``--mode pick`` writes the
best record per workload to ``--o`` (default ``<i>.best.log``); ``--mode split`` writes one
``<i>.NNN.wkl`` file per workload.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m templtune.autotvm.record",
                                description="Read, pick the best of, or split an AutoTVM log.")
    p.add_argument("--mode", choices=["read", "pick", "split"], default="read")
    p.add_argument("--i", type=str, help="input file")
    p.add_argument("--o", type=str, default=None, help="output file (pick: <i>.best.log)")
    p.add_argument("--begin", type=int, default=0, help="read: first record index")
    p.add_argument("--end", type=int, default=5, help="read: one past the last record index")
    p.add_argument("--ir", action="store_true", help="read: print the lowered loop IR")
    p.add_argument("--code", action="store_true", help="read: print the generated source")
    return p


def _read(path: str, begin: int, end: int, ir: bool, code: bool) -> None:
    from templtune.autotvm.record import load_from_file

    if ir or code:
        # NOTE: re-instantiating a record needs its template; the built-in ones register on import
        from templtune.autotvm.strategy import load_templates

        load_templates()
    for i, (inp, result) in enumerate(load_from_file(path)):
        if not begin <= i < end:
            continue
        print("")
        print(inp.target, inp.task, inp.config)
        print(result)
        if ir or code:
            with inp.target:
                s, arg_bufs = inp.task.instantiate(inp.config)
            if ir:
                from templtune.lower.lower_api import lower

                print(lower(s, arg_bufs, simple_mode=True))
            if code:
                from templtune.build_module import build

                print(build(s, arg_bufs, target=inp.target).get_source())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.i is None:
        parser.error("--i (the input log) is required")
    # NOTE: a program entry point, so it may configure logging (TVM's tool logs at INFO).
    logging.basicConfig(level=logging.INFO)
    from templtune.autotvm import record

    if args.mode == "pick":
        record.pick_best(args.i, args.o or args.i + ".best.log")
    elif args.mode == "split":
        record.split_workload(args.i)
    else:
        _read(args.i, args.begin, args.end, args.ir, args.code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
