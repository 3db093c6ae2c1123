"""``templtune tune``: tune one template workload from the shell.

::

    templtune tune --template conv2d_nchw --args 1,7,7,512,512,3,3,1,1 --target llvm \\
        --tuner xgb --n-trial 200 --log logs/conv2d.log [--early-stopping N] [--seed S]

Shows the progress bar while tuning and ends with a summary: best config, GFLOPS, trials and
wall time. The helpers here (argument parsing, task creation, the tuning run) are shared by the
``space``, ``best`` and ``demo`` commands.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from templtune.cli.main import CliError, command

logger = logging.getLogger("templtune.cli")



def tuner_names() -> list[str]:
    """The ``--tuner`` choices: every tuner in the registry
    (:data:`templtune.autotvm.tuner.TUNERS`)."""
    from templtune.autotvm.tuner.registry import load_tuners

    return sorted(load_tuners())


def parse_int_list(text: str, what: str = "--args") -> tuple[int, ...]:
    """``"1,7,7"`` -> ``(1, 7, 7)``; raises :class:`CliError` naming the bad item."""
    items = [t.strip() for t in str(text).split(",")]
    if not text or not text.strip() or any(not t for t in items):
        raise CliError(f"{what}: expected comma-separated integers such as 1,7,7,512, "
                       f"got {text!r}")
    out = []
    for t in items:
        try:
            out.append(int(t))
        except ValueError:
            raise CliError(f"{what}: {t!r} is not an integer (in {text!r})") from None
    return tuple(out)


def load_templates() -> dict[str, Any]:
    """Register the packaged templates; returns the catalogue (name -> TemplateInfo)."""
    from templtune.autotvm import strategy

    return strategy.catalog_entries()


def create_task(name: str, args: tuple[int, ...], target: str) -> Any:
    """Create the task of a packaged template, with one-line errors for bad input."""
    from templtune import autotvm

    catalog = load_templates()
    info = catalog.get(name)
    if info is None:
        raise CliError(f"unknown template {name!r}; known: {', '.join(sorted(catalog))} "
                       "(see 'templtune templates')")
    try:
        info.check_args(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    _check_target(info, target)
    try:
        return autotvm.task.create(name, args, target)
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bad workload/target becomes one line
        raise CliError(f"cannot create task {name}{args} for target {target!r}: {exc}") from None


def _check_target(info: Any, target: str) -> None:
    """Refuse a template for a target it was not written for (e.g. an x86 template for cuda),
    before any trial fails on it."""
    from templtune.autotvm import strategy

    try:
        keys = strategy.target_keys(target)
    except Exception as exc:  # noqa: BLE001 - a bad target string becomes one line
        raise CliError(f"cannot create task {info.name} for target {target!r}: {exc}") from None
    if not info.supports(target):
        raise CliError(
            f"template {info.name!r} is for {info.target} targets ({info.family} family, keys "
            f"{', '.join(sorted(info.target_keys))}); --target {target!r} has keys "
            f"{', '.join(sorted(keys)) or 'none'}: see 'templtune templates --target {target}'")


def make_tuner(kind: str, task: Any, seed: int | None) -> Any:
    """The registered tuner named ``kind`` for ``task``."""
    from templtune.autotvm.tuner.registry import get_tuner

    try:
        info = get_tuner(kind)
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from None
    return info.create(task, seed=seed)


@dataclass(frozen=True, slots=True)
class TuneSummary:
    """What a tuning run found."""

    best_config: Any
    best_gflops: float
    best_cost_s: float
    trials: int
    errors: int
    wall_s: float
    log: Path
    resumed: int = 0


def tune_task(task: Any, *, tuner: str = "xgb", n_trial: int = 200, log: str | os.PathLike,
              early_stopping: int | None = None, seed: int | None = 0, number: int = 4,
              repeat: int = 3, min_repeat_ms: float = 0, timeout: float = 20,
              n_parallel: int | None = None, progress: bool = True,
              option: dict | None = None, resume: bool = False,
              time_budget: float | None = None, initial_configs: Sequence[Any] = ()
              ) -> TuneSummary:
    """Tune ``task`` and append its records to ``log``, whose folder must exist. ``option``: a
    ``measure_option`` to reuse across tasks (its worker processes stay up); by default one
    is made from the timing arguments. ``resume``: the log's records of this task are not
    measured again and count toward ``n_trial``. ``time_budget``: seconds after which no new
    batch starts. ``initial_configs`` are measured first. The progress bar draws on
    stderr."""
    from templtune import autotvm

    if n_trial < 1:
        raise CliError(f"--n-trial must be at least 1, got {n_trial}")
    if time_budget is not None and time_budget <= 0:
        raise CliError(f"--time-budget must be positive, got {time_budget:g}")
    log_path = check_log_path(log)
    if option is None:
        option = autotvm.measure_option(
            builder=autotvm.LocalBuilder(timeout=timeout, n_parallel=n_parallel),
            runner=autotvm.LocalRunner(timeout=timeout, number=number, repeat=repeat,
                                       min_repeat_ms=min_repeat_ms))
    t = make_tuner(tuner, task, seed)
    n_trial = min(n_trial, len(task.config_space))
    callbacks = [autotvm.callback.log_to_file(str(log_path))]
    if progress:
        callbacks.insert(0, autotvm.callback.progress_bar(n_trial, prefix=f"[{task.name}] ",
                                                          file=sys.stderr))
    t0 = time.perf_counter()
    t.tune(n_trial=n_trial, measure_option=option, early_stopping=early_stopping,
           callbacks=callbacks, resume_log=log_path if resume else None,
           time_budget=time_budget, initial_configs=initial_configs)
    wall = time.perf_counter() - t0
    stats = getattr(t, "tune_stats", {})
    pair = getattr(t, "best_measure_pair", None)
    cost = float(pair[1].mean_cost) if pair else float("nan")
    return TuneSummary(t.best_config, float(t.best_flops) / 1e9, cost,
                       int(stats.get("trials", 0)), int(stats.get("errors", 0)), wall, log_path,
                       int(stats.get("resumed", 0)))


def check_log_path(log: str | os.PathLike, create_parent: bool = False) -> Path:
    """``log`` as a Path; its folder must exist (a typo must not silently create folders)
    unless ``create_parent`` (the commands' default log folders)."""
    path = Path(log)
    parent = path.parent
    if create_parent:
        parent.mkdir(parents=True, exist_ok=True)
    elif not parent.is_dir():
        raise CliError(f"--log {os.fspath(log)}: folder {os.fspath(parent)} does not exist "
                       "(create it first)")
    if path.is_dir():
        raise CliError(f"--log {os.fspath(log)} is a folder, not a log file")
    return path


def print_summary(task: Any, s: TuneSummary) -> None:
    """The final lines of ``tune`` and ``demo``."""
    print(f"task:        {task.name}{tuple(task.args)}  ({task.flop / 1e9:.4g} GFLOP)")
    if s.best_config is None:
        print(f"trials:      {s.trials} ({s.errors} failed), wall time {s.wall_s:.1f} s")
        return
    print(f"best config: {s.best_config}")
    print(f"best:        {s.best_gflops:.2f} GFLOPS ({s.best_cost_s * 1e3:.4f} ms)")
    print(f"trials:      {s.trials} ({s.errors} failed), wall time {s.wall_s:.1f} s"
          + (f"; {s.resumed} more resumed from the log" if s.resumed else ""))
    print(f"log:         {s.log}")


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    """``--template``, ``--args`` and ``--target``."""
    p.add_argument("--template", required=True, help="template name (see 'templtune templates')")
    p.add_argument("--args", required=True,
                   help="comma-separated integer arguments, e.g. 1,7,7,512,512,3,3,1,1")
    p.add_argument("--target", default="llvm", help="target string (default llvm)")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return v


def cmd_tune(args: argparse.Namespace) -> int:
    task = create_task(args.template, parse_int_list(args.args), args.target)
    log = check_log_path(args.log or f"logs/{args.template}.log", create_parent=not args.log)
    if args.resume and log.is_file():
        print(f"resuming from {log} (--no-resume to start over)", file=sys.stderr)
    summary = tune_task(task, tuner=args.tuner, n_trial=args.n_trial, log=log,
                        early_stopping=args.early_stopping, seed=args.seed, number=args.number,
                        repeat=args.repeat, timeout=args.timeout, n_parallel=args.n_parallel,
                        progress=not args.no_progress, resume=args.resume,
                        time_budget=args.time_budget)
    print_summary(task, summary)
    if summary.best_config is None:
        raise CliError(f"no trial succeeded ({summary.errors} failed); rerun with -v -v "
                       "to see why")
    return 0


@command("tune", help="tune a template workload and log the measurements")
def setup(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(parser)
    parser.add_argument("--tuner", choices=tuner_names(), default="xgb", help="search strategy")
    parser.add_argument("--n-trial", type=positive_int, default=200, help="configs to measure")
    parser.add_argument("--log", default=None,
                        help="JSON-lines log to append to (default logs/TEMPLATE.log)")
    parser.add_argument("--early-stopping", type=positive_int, default=None,
                        help="stop after this many trials without improvement")
    parser.add_argument("--seed", type=int, default=0, help="tuner seed (default 0)")
    parser.add_argument("--number", type=positive_int, default=4,
                        help="runs per measurement (default 4)")
    parser.add_argument("--repeat", type=positive_int, default=3,
                        help="measurements per config (default 3)")
    parser.add_argument("--timeout", type=float, default=20, help="seconds per build/run")
    parser.add_argument("--n-parallel", type=positive_int, default=None,
                        help="parallel builds (default: CPU count)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-resume", dest="resume", action="store_false",
                        help="start over: search from scratch, ignoring the records already "
                             "in --log (new ones are still appended). By default configs "
                             "already in --log are not measured again and count toward "
                             "--n-trial")
    parser.add_argument("--time-budget", type=positive_float, default=None, metavar="SECONDS",
                        help="stop starting new measurements after this many seconds")
    parser.set_defaults(func=cmd_tune)
