"""``templtune templates``: list the packaged templates with their arguments."""

from __future__ import annotations

import argparse

from templtune.cli.main import command
from templtune.cli.tune_cmd import load_templates


def cmd_templates(args: argparse.Namespace) -> int:
    catalog = load_templates()
    for name in sorted(catalog):
        info = catalog[name]
        if args.family and info.family != args.family:
            continue
        need = len(info.params) if info.n_required < 0 else info.n_required
        params = ",".join(p if i < need else f"[{p}]" for i, p in enumerate(info.params))
        example = ",".join(str(a) for a in info.example)
        print(f"{name:<24} {info.family:<5} {info.summary}")
        print(f"{'':<24} args: {params}")
        print(f"{'':<24} e.g.  templtune tune --template {name} --args {example}")
    return 0


@command("templates", help="list the packaged templates and their arguments")
def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", choices=("x86",), default=None, help="only this family")
    parser.set_defaults(func=cmd_templates)
