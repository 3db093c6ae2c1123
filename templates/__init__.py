"""Ready-made AutoTVM templates, installed as ``templtune.templates``.

Every template module registers, beside its template, the network op it implements (an op
strategy, :mod:`templtune.autotvm.strategy`) and its command-line catalogue entry. A family's
modules are found by listing its folder, so a new template is one new file.
:func:`load_all` (what the strategy registry calls) imports every family; :func:`load` one.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

from templtune.autotvm.strategy import CATALOG, TemplateInfo

__all__ = ["TemplateInfo", "CATALOG", "FAMILIES", "load", "load_all", "import_family",
           "reference_log_dir"]

FAMILIES = ("x86", "cuda")


def import_family(package: ModuleType) -> None:
    """Import every public module of a family package (``_``-prefixed ones are helpers)."""
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")


def load(family: str = "x86") -> None:
    """Import (and so register) the templates of ``family`` (``"x86"`` or ``"cuda"``)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown template family {family!r} ({', '.join(FAMILIES)})")
    importlib.import_module(f"{__name__}.{family}")


def load_all() -> None:
    """Import every family: the entry point :func:`templtune.autotvm.strategy.load_templates`
    calls."""
    for family in FAMILIES:
        load(family)


def reference_log_dir() -> Path:
    """The folder of the pre-tuned reference logs shipped with the package
    (``<dir>/<target key>/*.log``)."""
    return Path(__file__).resolve().parent / "logs"
