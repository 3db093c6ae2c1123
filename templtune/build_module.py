"""``templtune.build``: schedule or loop IR -> callable module for a target."""

from __future__ import annotations

from typing import Any

from templtune.errors import TargetError
from templtune.lower.ir import PrimFunc
from templtune.target import Target, resolve

__all__ = ["build"]


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
    if tgt.kind == "llvm":
        return build_llvm(func, tgt, name=entry)
    if tgt.kind == "cuda":
        from templtune.codegen.cuda import build_cuda

        return build_cuda(func, tgt)
    raise TargetError(f"cannot build for target kind {tgt.kind!r}")


def build_llvm(func: PrimFunc, target: Target | None = None, name: str | None = None,
               timings: dict[str, float] | None = None) -> Any:
    """Compile ``func`` for an llvm target and load it (``timings`` as in
    :func:`templtune.codegen.llvm.compile_func`, plus ``load``)."""
    import time

    from templtune.codegen.llvm import compile_func
    from templtune.runtime.module import Module

    obj, header = compile_func(func, target, name=name, timings=timings)
    t0 = time.perf_counter()
    mod = Module(obj, header)
    if timings is not None:
        timings["load"] = time.perf_counter() - t0
    return mod
