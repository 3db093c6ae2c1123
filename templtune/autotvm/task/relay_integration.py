"""``autotvm.task.extract_from_program``: the AutoTVM tasks a program would run.

A program is a callable (it runs under task tracing, as :func:`~.topi_integration.
extract_tasks` does), or a network of a front end that registered how to turn it into one:
the network layer (:mod:`templtune.graph`, above AutoTVM) calls :func:`register_program` for
its ``Function``, so this module never imports it. Both go through ``extract_tasks``: one
extraction path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from templtune.autotvm.task.task import Task
from templtune.autotvm.task.topi_integration import extract_tasks
from templtune.errors import TempltuneError

__all__ = ["extract_from_program", "register_program"]

#: (network, params, target, ops) -> the program that instantiates the network's templates
ProgramFactory = Callable[[Any, Any, Any, "Iterable[str] | None"], Callable[[], Any]]

_PROGRAMS: dict[type, ProgramFactory] = {}


def register_program(cls: type, factory: ProgramFactory) -> None:
    """Let :func:`extract_from_program` take networks of type ``cls``: ``factory(mod, params,
    target, ops)`` returns the program whose template calls are the network's tasks (``ops``:
    the network op names to keep, None for all)."""
    _PROGRAMS[cls] = factory


def _factory(mod: Any) -> ProgramFactory | None:
    for cls in type(mod).__mro__:
        if cls in _PROGRAMS:
            return _PROGRAMS[cls]
    return None


def extract_from_program(mod: Any, params: Any, target: Any, target_host: Any = None,
                         ops: Any = None) -> list[Task]:
    """AutoTVM tasks of ``mod``, one per distinct template workload, in first-seen order.

    Parameters
    ----------
    mod : Function or callable
        A :mod:`templtune.graph` network (``mod["main"]``): the tasks of the implementations
        ``relay.build`` would run for its anchor ops; or a callable program.
    params : dict, optional
        Bound parameters (whether a weight is constant decides if it may be pre-transformed).
    target, target_host : Target or str
    ops : list, optional
        Network op names (``["nn.conv2d"]``, or objects with a ``name``) for a network, task
        names for a callable program.

    Raises
    ------
    TempltuneError
        If ``mod`` is neither a registered network type nor callable.
    """
    names = None if ops is None else [getattr(o, "name", o) for o in ops]
    factory = _factory(mod)
    if factory is not None:
        return extract_tasks(factory(mod, params, target, names), target, target_host)
    if callable(mod):
        return extract_tasks(mod, target, target_host, ops=names)
    raise TempltuneError(f"extract_from_program takes a network or a callable program, not "
                         f"{type(mod).__name__} (is templtune.graph imported?)")
