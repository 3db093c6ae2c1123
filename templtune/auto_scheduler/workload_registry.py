"""Workload registry: a name -> function returning the tensors of a computation.

A workload key is a JSON list ``[func_name, *args]`` (``make_workload_key``) or, for DAG-keyed
workloads, ``[md5-of-the-DAG, *shapes]`` registered with :func:`register_workload_tensors`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger("auto_scheduler")

# NOTE: a plain dict filled by decorators (as the AutoTVM template registry); worker processes
# receive what they need explicitly (the pickled DAG), never this dict.
WORKLOAD_FUNC_REGISTRY: dict[str, Any] = {}


def register_workload(func_name: Any, f: Callable | None = None, override: bool = False) -> Any:
    """Register a function returning the input and output tensors of a workload.

    Usable as ``@register_workload``, ``@register_workload("name")`` or
    ``register_workload("name", func)``.

    Raises
    ------
    ValueError
        When the name is registered already and ``override`` is False.
    """
    if callable(func_name):
        f, func_name = func_name, func_name.__name__
    if not isinstance(func_name, str):
        raise ValueError(f"register_workload expects a function or a name, got {func_name!r}")

    def register(myf: Callable) -> Callable:
        if func_name in WORKLOAD_FUNC_REGISTRY and not override:
            raise ValueError(f"workload {func_name!r} is already registered "
                             f"(pass override=True to replace it)")
        WORKLOAD_FUNC_REGISTRY[func_name] = myf
        return myf

    return register(f) if f is not None else register


def register_workload_tensors(workload_key: str, tensors: Sequence[Any],
                              override: bool = True) -> str:
    """Register the tensors of a DAG-keyed workload directly under ``workload_key``."""
    if workload_key in WORKLOAD_FUNC_REGISTRY and not override:
        raise ValueError(f"workload {workload_key!r} is already registered")
    WORKLOAD_FUNC_REGISTRY[workload_key] = list(tensors)
    return workload_key


def _shape_int(s: Any) -> int:
    from templtune.te.expr import const_int

    v = const_int(s)
    if v is None:
        raise ValueError(f"workload arguments need constant shapes, got {s}")
    return v


def _serialize_arg(a: Any) -> Any:
    from templtune.te.tensor import Tensor

    if isinstance(a, Tensor):
        return ["TENSOR", [_shape_int(s) for s in a.shape], a.dtype]
    if isinstance(a, (list, tuple)):
        return [_serialize_arg(x) for x in a]
    if hasattr(a, "value"):
        return a.value
    return a


def _deserialize_arg(a: Any) -> Any:
    if isinstance(a, list):
        if len(a) == 3 and a[0] == "TENSOR":
            from templtune import te

            return te.placeholder(tuple(a[1]), dtype=a[2])
        return tuple(_deserialize_arg(x) for x in a)
    return a


def _func_name(func: Any) -> str:
    name: str | None
    if isinstance(func, str):
        name = func
    else:
        found = next((k for k, v in WORKLOAD_FUNC_REGISTRY.items() if v is func), None)
        name = found if found is not None else getattr(func, "__name__", None)
    if name is None or name not in WORKLOAD_FUNC_REGISTRY:
        raise ValueError(f"workload function {func!r} is not registered; decorate it with "
                         f"@auto_scheduler.register_workload")
    return name


def make_workload_key(func: Any, args: Sequence[Any]) -> str:
    """``json.dumps([func_name, *args])`` for a registered function (or its name)."""
    name = _func_name(func)
    return json.dumps([name, *[_serialize_arg(a) for a in args]])


def decode_workload_key(workload_key: str) -> tuple[str, tuple | None]:
    """``(name_or_hash, flattened_args)``; ``(key, None)`` when the key is not a JSON list."""
    try:
        val = json.loads(workload_key)
    except (TypeError, ValueError, RecursionError):  # keys come from logs: any text
        return workload_key, None
    if not isinstance(val, list) or not val:
        return workload_key, None

    def flat(x: Any) -> list:
        if isinstance(x, (list, tuple)):
            return [y for z in x for y in flat(z)]
        return [x]

    try:
        return str(val[0]), tuple(flat(val[1:]))
    except RecursionError:
        return workload_key, None


def workload_key_to_tensors(workload_key: str) -> list[Any]:
    """The tensors of a workload: an exact registered key first, else call the named function
    with the decoded arguments."""
    hit = WORKLOAD_FUNC_REGISTRY.get(workload_key)
    if isinstance(hit, list):
        return list(hit)
    try:
        val = json.loads(workload_key)
    except ValueError as exc:
        raise ValueError(f"unknown workload key {workload_key!r}") from exc
    name = val[0]
    func = WORKLOAD_FUNC_REGISTRY.get(name)
    if func is None:
        raise ValueError(f"workload {name!r} of key {workload_key!r} is not registered")
    if isinstance(func, list):
        return list(func)
    args = [_deserialize_arg(a) for a in val[1:]]
    return list(func(*args))
