"""The tuner registry: ``TUNERS`` maps a short name (``templtune tune --tuner NAME``) to a
:class:`TunerInfo`, filled by :func:`register_tuner` beside each tuner class.

Adding a tuner is one file in this package: :func:`load_tuners` imports every module here, so
the CLI, the tests and the benchmarks see the new name without being edited.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["TUNERS", "TunerInfo", "register_tuner", "load_tuners", "get_tuner"]


@dataclass(frozen=True, slots=True)
class TunerInfo:
    """A registered tuner.

    Attributes
    ----------
    name : str
        The short name (``"xgb"``, ``"ga"``, ...).
    cls : type
        The :class:`~templtune.autotvm.tuner.Tuner` subclass.
    summary : str
        One line for ``--help`` and reports.
    needs_features : bool
        True for model-based tuners: they extract features from the task's template, so they
        cannot run on a task without one (the fake-space tests).
    exhaustive : bool
        True when the tuner proposes every valid config if the budget allows (False for local
        searches that stop once converged).
    """

    name: str
    cls: type
    summary: str
    needs_features: bool = False
    exhaustive: bool = True

    def create(self, task: Any, seed: Any = None, **kwargs: Any) -> Any:
        """A new tuner for ``task`` (``kwargs`` go to the class)."""
        return self.cls(task, seed=seed, **kwargs)


TUNERS: dict[str, TunerInfo] = {}

T = TypeVar("T", bound=type)


def register_tuner(name: str, summary: str, *, needs_features: bool = False,
                   exhaustive: bool = True) -> Callable[[T], T]:
    """Class decorator: register the tuner class under ``name``.

    Raises
    ------
    ValueError
        ``name`` is already registered to another class.
    """

    def deco(cls: T) -> T:
        old = TUNERS.get(name)
        if old is not None and (old.cls.__module__, old.cls.__qualname__) != (
                cls.__module__, cls.__qualname__):
            raise ValueError(f"tuner name {name!r} is taken by {old.cls.__qualname__}")
        TUNERS[name] = TunerInfo(name, cls, summary, needs_features, exhaustive)
        return cls

    return deco


def load_tuners() -> dict[str, TunerInfo]:
    """Import every module of this package (registering its tuners); return :data:`TUNERS`.

    NOTE: modules are cheap to import (xgboost and scikit-learn load when a model trains).
    """
    package = __name__.rsplit(".", 1)[0]
    pkg = importlib.import_module(package)
    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{package}.{mod.name}")
    return TUNERS


def get_tuner(name: str) -> TunerInfo:
    """The registered tuner ``name``.

    Raises
    ------
    KeyError
        Unknown name; the message lists the registered ones.
    """
    tuners = load_tuners()
    if name not in tuners:
        raise KeyError(f"unknown tuner {name!r}; registered: {', '.join(sorted(tuners))}")
    return tuners[name]
