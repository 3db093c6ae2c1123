"""``templtune best LOG``: the best record of each workload in a tuning log."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from templtune.cli.main import CliError, command
from templtune.cli.tune_cmd import load_templates


def _flop(inp: Any, cache: dict[tuple, float]) -> float:
    """The FLOP count of a record's task (recomputed from the template; 0 if unknown)."""
    key = (inp.task.name, repr(inp.task.args), str(inp.target))
    if key not in cache:
        flop = float(getattr(inp.task, "flop", 0) or 0)
        if not flop:
            try:
                from templtune import autotvm

                flop = float(autotvm.task.create(inp.task.name, inp.task.args, inp.target).flop)
            except Exception:  # noqa: BLE001 - a template not registered here: no GFLOPS
                flop = 0.0
        cache[key] = flop
    return cache[key]


def cmd_best(args: argparse.Namespace) -> int:
    from templtune.autotvm.record import load_from_file

    path = Path(args.log)
    if not path.is_file():
        raise CliError(f"no such log file: {args.log}")
    load_templates()
    best: dict[tuple, tuple[float, Any, Any]] = {}
    n = n_err = 0
    for inp, res in load_from_file(path):
        n += 1
        if int(res.error_no) != 0 or not res.costs:
            n_err += 1
            continue
        if args.template and inp.task.name not in (args.template, f"{args.template}.x86"):
            continue
        cost = sum(res.costs) / len(res.costs)
        key = (str(inp.target), inp.task.name, repr(inp.task.args))
        if key not in best or cost < best[key][0]:
            best[key] = (cost, inp, res)
    if not best:
        raise CliError(f"{args.log}: no successful record ({n} records, {n_err} failed)"
                       + (f" for template {args.template!r}" if args.template else ""))
    flops: dict[tuple, float] = {}
    for (target, name, _), (cost, inp, _res) in sorted(best.items()):
        flop = _flop(inp, flops)
        gflops = f"{flop / cost / 1e9:.2f} GFLOPS" if flop and cost > 0 else "GFLOPS unknown"
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
