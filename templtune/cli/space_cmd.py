"""``templtune space --template NAME --args ...``: print a task's configuration space."""

from __future__ import annotations

import argparse

from templtune.cli.main import command
from templtune.cli.tune_cmd import add_task_arguments, create_task, parse_int_list


def cmd_space(args: argparse.Namespace) -> int:
    task = create_task(args.template, parse_int_list(args.args), args.target)
    space = task.config_space
    print(f"task: {task.name}{tuple(task.args)}  target: {args.target}  "
          f"FLOP: {task.flop:.6g}")
    print(space)
    print(f"valid configs: {len(space)} of {space.range_length}")
    return 0


@command("space", help="print the configuration space of a template workload")
def setup(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(parser)
    parser.set_defaults(func=cmd_space)
