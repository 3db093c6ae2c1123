"""``templtune templates``: list the packaged templates with their arguments, from the
catalogue entries the templates register (:func:`templtune.autotvm.strategy.catalog`)."""

from __future__ import annotations

import argparse

from templtune.autotvm import strategy
from templtune.cli.main import CliError, command

_DEFAULT_TARGET = "llvm"  # tune's --target default


def cmd_templates(args: argparse.Namespace) -> int:
    try:
        catalog = strategy.catalog_entries(args.family, args.target)
    except Exception as exc:  # noqa: BLE001 - a bad target string becomes one line
        raise CliError(f"--target {args.target!r}: {exc}") from None
    for name in sorted(catalog):
        info = catalog[name]
        need = len(info.params) if info.n_required < 0 else info.n_required
        params = ",".join(p if i < need else f"[{p}]" for i, p in enumerate(info.params))
        example = ",".join(str(a) for a in info.example)
        # NOTE: the example names a target only when the CLI's default one (llvm) does not fit
        target = "" if info.supports(_DEFAULT_TARGET) else f" --target {info.target}"
        print(f"{name:<26} {info.family:<5} {info.summary}")
        print(f"{'':<26} args: {params}")
        print(f"{'':<26} e.g.  templtune tune --template {name} --args {example}{target}")
    return 0


@command("templates", help="list the packaged templates and their arguments")
def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", choices=("x86", "cuda"), default=None,
                        help="only this family")
    parser.add_argument("--target", default=None,
                        help="only templates tunable for this target (e.g. cuda, llvm)")
    parser.set_defaults(func=cmd_templates)
