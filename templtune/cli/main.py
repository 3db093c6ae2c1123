"""The ``templtune`` command line (entry point ``templtune.cli.main:main``).

Subcommands live in modules of this package named ``*_cmd.py``; each registers itself with
:func:`command`, so adding ``tune_cmd.py`` adds ``templtune tune`` without touching this file::

    @command("log", help="inspect AutoTVM logs")
    def setup(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(...)
        parser.set_defaults(func=run)      # run(args) -> int exit status

This package is the only place in templtune that configures logging. Errors are reported as one
line ``templtune: error: ...`` with a non-zero exit status, never as a traceback (``-v -v``
shows tracebacks for debugging).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CliError", "command", "COMMANDS", "build_parser", "main"]


class CliError(Exception):
    """A user error: printed as one line, exit status 1."""


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str
    setup: Callable[[argparse.ArgumentParser], None]


#: subcommand name -> Command, filled by :func:`command` when ``*_cmd`` modules are imported.
COMMANDS: dict[str, Command] = {}


def command(name: str, help: str) -> Callable[[Callable[[argparse.ArgumentParser], None]],
                                             Callable[[argparse.ArgumentParser], None]]:
    """Register ``setup(parser)`` as subcommand ``name``."""

    def deco(setup: Callable[[argparse.ArgumentParser], None]
             ) -> Callable[[argparse.ArgumentParser], None]:
        if name in COMMANDS and COMMANDS[name].setup is not setup:
            raise ValueError(f"CLI command {name!r} is registered twice")
        COMMANDS[name] = Command(name, help, setup)
        return setup

    return deco


def _discover() -> None:
    pkg = importlib.import_module("templtune.cli")
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.endswith("_cmd"):
            importlib.import_module(f"templtune.cli.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every discovered subcommand."""
    _discover()
    from templtune import __version__

    parser = argparse.ArgumentParser(prog="templtune",
                                     description="templtune: tensor-program auto-tuner")
    parser.add_argument("--version", action="version", version=f"templtune {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-v info, -vv debug and tracebacks)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in sorted(COMMANDS):
        cmd = COMMANDS[name]
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.setup(p)
    return parser


def _configure_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 success, 1 error, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
        return int(exc.code or 0)
    _configure_logging(args.verbose)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_usage(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("templtune: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line
        if args.verbose >= 2:
            raise
        msg = str(exc) or type(exc).__name__
        if not isinstance(exc, CliError):
            msg = f"{msg} ({type(exc).__name__})"
        print(f"templtune: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
