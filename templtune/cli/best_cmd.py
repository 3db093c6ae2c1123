"""``templtune best LOG``: the best record of each workload in a tuning log.

A log is untrusted input, and showing GFLOPS needs the FLOP count of each workload, which only
the template knows: re-running a template on a log's arguments is how a single line naming
``dense`` with N = 10^18 made this command factor 10^18 for minutes. So what a log can make it
compute is bounded:

* a template is re-run only on arguments within
  :func:`templtune.autotvm.record.args_within_bounds` (at most 64 integers, each at most 2^24:
  config-space construction costs about the square root of an axis length per axis; real
  tensor dimensions are far below the bound);
* at most :data:`MAX_TASKS` distinct workloads are re-created, and none after
  :data:`FLOP_BUDGET_S` seconds have gone into it; the others show "GFLOPS unknown".

When the task could be re-created, its config space also vets the records: a config that does
not fit the space (missing knobs, a split that does not multiply to the axis) is skipped with a
warning and the next-fastest record of the workload is shown.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from templtune.cli.log_format import LogFormat, require_format, skipped_note
from templtune.cli.main import CliError, command
from templtune.cli.tune_cmd import load_templates

logger = logging.getLogger("templtune.cli")

MAX_TASKS = 64
FLOP_BUDGET_S = 10.0


@dataclass
class TaskCache:
    """Re-created tasks per (name, args, target), within the bounds of the module docstring."""

    cache: dict[tuple, Any] = field(default_factory=dict)
    spent_s: float = 0.0

    def get(self, inp: Any) -> Any:
        key = (inp.task.name, repr(inp.task.args), str(inp.target))
        if key in self.cache:
            return self.cache[key]
        from templtune.autotvm.record import args_within_bounds

        task = None
        if not args_within_bounds(inp.task.args):
            logger.info("%s%r: arguments beyond the bounds; not re-created", inp.task.name,
                        inp.task.args)
        elif len(self.cache) < MAX_TASKS and self.spent_s < FLOP_BUDGET_S:
            from templtune import autotvm

            t0 = time.perf_counter()
            try:
                task = autotvm.task.create(inp.task.name, inp.task.args, inp.target)
            except Exception:  # noqa: BLE001 - a template not registered here: no GFLOPS
                task = None
            self.spent_s += time.perf_counter() - t0
        self.cache[key] = task
        return task


def pick_fitting(cands: list[tuple[float, int, Any, Any]], task: Any) -> tuple[float, Any, Any] | None:
    """The fastest candidate whose config fits ``task``'s space (all of them without a task)."""
    from templtune.autotvm.record import check_config

    for cost, _, inp, res in sorted(cands, key=lambda c: c[:2]):
        why = None if task is None else check_config(task.config_space, inp.config)
        if why is None:
            return cost, inp, res
        logger.warning("ignoring the record of config #%s of %s%r: %s", inp.config.index,
                       inp.task.name, tuple(inp.task.args), why)
    return None


def cmd_best(args: argparse.Namespace) -> int:
    from templtune.autotvm.record import load_from_file, usable_cost

    path = Path(args.log)
    if not path.is_file():
        raise CliError(f"no such log file: {args.log}")
    require_format(path, (LogFormat.AUTOTVM,), "best")
    load_templates()
    cands: dict[tuple, list[tuple[float, int, Any, Any]]] = {}
    n = n_err = 0
    skipped: list[int] = []
    for inp, res in load_from_file(path, skipped):
        n += 1
        cost = usable_cost(res)
        if cost is None:
            n_err += 1
            continue
        if args.template and inp.task.name not in (args.template, f"{args.template}.x86"):
            continue
        key = (str(inp.target), inp.task.name, repr(inp.task.args))
        cands.setdefault(key, []).append((cost, n, inp, res))
    if skipped:
        logger.warning("%s", skipped_note(path, skipped))
    tasks = TaskCache()
    best: dict[tuple, tuple[float, Any, Any, Any]] = {}
    for key, group in cands.items():
        task = tasks.get(group[0][2])
        hit = pick_fitting(group, task)
        if hit is not None:
            best[key] = (*hit, task)
    if not best:
        raise CliError(f"{args.log}: no successful record ({n} records, {n_err} failed)"
                       + (f" for template {args.template!r}" if args.template else ""))
    for (target, name, _), (cost, inp, _res, task) in sorted(best.items()):
        flop = float(getattr(task, "flop", 0) or 0)
        gflops = f"{flop / cost / 1e9:.2f} GFLOPS" if flop else "GFLOPS unknown"
        print(f"{name}{tuple(inp.task.args)}  target: {target}")
        print(f"  best: {cost * 1e3:.4f} ms, {gflops}, config #{inp.config.index}")
        print(f"  config: {inp.config}")
    print(f"{len(best)} workloads, {n} records ({n_err} failed)")
    return 0


@command("best", help="show the best config of each workload in a tuning log")
def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="AutoTVM JSON-lines log")
    parser.add_argument("--template", default=None, help="only this template")
    parser.set_defaults(func=cmd_best)
