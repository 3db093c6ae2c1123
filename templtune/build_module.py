"""``templtune.build``: schedule or loop IR -> callable module, through the backend registered
for the target kind (:mod:`templtune.codegen.registry`, :mod:`templtune.runtime.registry`)."""

from __future__ import annotations

import time
from typing import Any

from templtune.codegen.registry import get_codegen, target_kind_name
from templtune.lower.ir import PrimFunc
from templtune.runtime.registry import get_loader
from templtune.target import Target, resolve

__all__ = ["build", "build_func"]


def build(s_or_func: Any, args: Any = None, target: str | Target | None = None,
          name: str = "default_function") -> Any:
    """Compile a schedule (with its argument tensors) or a lowered :class:`PrimFunc`.

    Parameters
    ----------
    s_or_func : Schedule or PrimFunc
        What to compile. A schedule is lowered with ``templtune.lower(s, args, name=name)``.
    args : list of Tensor, optional
        The function's arguments, in call order (required with a schedule).
    target : str or Target, optional
        ``"llvm ..."`` or ``"cuda ..."``; default: the enclosing ``with Target(...)``, else llvm.
    name : str
        Entry-function name (``module.entry_name``).

    Returns
    -------
    Module
        Callable on numpy arrays (``mod(a, b, c)``), with ``time_evaluator``, ``get_source``
        and ``export``.

    Raises
    ------
    TargetError
        For a target kind this build cannot compile for.
    """
    tgt = resolve(target)
    if isinstance(s_or_func, PrimFunc):
        func = s_or_func
        entry = func.name if name == "default_function" and func.name else name
    else:
        if args is None:
            raise TypeError("build(schedule, args, ...) needs the argument tensors")
        from templtune.lower.lower_api import lower

        func = lower(s_or_func, args, name=name)
        entry = name
    return build_func(func, tgt, name=entry)


def build_func(func: PrimFunc, target: Target, name: str | None = None,
               timings: dict[str, float] | None = None) -> Any:
    """Compile ``func`` through the backend registered for ``target``'s kind and load it.

    ``timings`` (when given) gets seconds per phase: ``render``, the backend's compile phases,
    and ``load``.

    Raises
    ------
    TargetError
        No backend or no runtime is registered for the target kind.
    """
    kind = target_kind_name(target)
    codegen, loader = get_codegen(kind), get_loader(kind)
    t0 = time.perf_counter()
    rendered = codegen.render(func, target, name)
    t1 = time.perf_counter()
    artifact = codegen.compile(rendered, target, timings)
    t2 = time.perf_counter()
    module = loader(artifact)
    if timings is not None:
        timings["render"] = t1 - t0
        timings["load"] = time.perf_counter() - t2
    return module


def build_llvm(func: PrimFunc, target: Target | None = None, name: str | None = None,
               timings: dict[str, float] | None = None) -> Any:
    """Compile ``func`` for an llvm target and load it (``timings`` as in :func:`build_func`)."""
    return build_func(func, resolve(target) if target is not None else resolve("llvm"),
                      name=name, timings=timings)
