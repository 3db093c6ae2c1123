"""Templates and tuning tasks.

``@autotvm.template("name")`` registers a schedule template in :data:`TASK_TABLE`;
:func:`create` turns a template name plus arguments into a :class:`Task` whose ``config_space``
was collected by running the template once.

Workloads are hashable tuples ``(task_name, arg0, arg1, ...)``: tensors become
``("TENSOR", shape, dtype)``, lists become tuples, IntImm/FloatImm/StringImm are unwrapped.
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from templtune.autotvm.dispatcher import ApplyConfig, DispatchContext
from templtune.autotvm.space import ConfigSpace
from templtune.autotvm.task.target_compat import as_target, current_target, target_scope
from templtune.errors import TempltuneError
from templtune.te.expr import FloatImm, IntImm, StringImm, Var

logger = logging.getLogger("autotvm")

__all__ = ["TASK_TABLE", "TaskTemplate", "Task", "UnknownTemplateError", "template", "create",
           "get_config", "serialize_args", "deserialize_args", "args_to_workload"]


class UnknownTemplateError(TempltuneError, LookupError):
    """No template is registered under the requested name."""


@dataclass(slots=True)
class TaskTemplate:
    """What is registered under a task name: a customized template function, or a compute and
    a schedule function (the ``register_topi_compute``/``register_topi_schedule`` style)."""

    name: str
    fcustomized: Callable[..., Any] | None = None
    fcompute: Callable[..., Any] | None = None
    fschedule: Callable[..., Any] | None = None

    def __call__(self, *raw: Any, **fused: Any) -> Any:
        """Run the template on ``raw`` arguments; ``fused`` (``epilogue=...``) goes to a
        customized template as keywords, outside the workload."""
        args = deserialize_args(raw)
        if self.fcustomized is not None:
            return self.fcustomized(*args, **fused)
        if fused:
            raise TypeError(f"template {self.name!r} (a compute/schedule pair) takes no "
                            f"keywords, got {sorted(fused)}")
        if self.fcompute is None or self.fschedule is None:
            raise UnknownTemplateError(f"template {self.name!r} has no compute/schedule pair")
        out = self.fcompute(*args)
        sch = self.fschedule([out])
        return sch, [out] + _input_placeholders(out)


#: name -> TaskTemplate, filled by ``@template``.
TASK_TABLE: dict[str, TaskTemplate] = {}

# NOTE: while task extraction traces a program, template and TOPI-compute calls append their
# workloads here (see ``topi_integration.extract_tasks``); None when not tracing.
_TRACE: ContextVar[list[tuple[Any, ...]] | None] = ContextVar("templtune_autotvm_trace",
                                                               default=None)


def trace_workload(workload: tuple[Any, ...]) -> None:
    """Record ``workload`` if a task extraction is tracing (no-op otherwise)."""
    trace = _TRACE.get()
    if trace is not None:
        trace.append(workload)


def _unknown(name: str) -> UnknownTemplateError:
    known = ", ".join(sorted(TASK_TABLE)) or "none registered"
    return UnknownTemplateError(f"no AutoTVM template named {name!r} (known templates: {known}); "
                                "is the module that defines it imported?")


def _input_placeholders(out: Any) -> list[Any]:
    from templtune.te.tensor import PlaceholderOp

    seen: list[Any] = []
    queue, visited = [out], set()
    while queue:
        t = queue.pop(0)
        for inp in t.op.input_tensors:
            if id(inp.op) in visited:
                continue
            visited.add(id(inp.op))
            if isinstance(inp.op, PlaceholderOp):
                seen.append(inp)
            else:
                queue.append(inp)
    return seen


def _encode_arg(x: Any) -> Any:
    from templtune.te.tensor import Tensor

    if isinstance(x, Tensor):
        shape = tuple(s.value if isinstance(s, IntImm) else s for s in x.shape)
        return ("TENSOR", shape, x.dtype)
    if isinstance(x, (list, tuple)):
        return tuple(_encode_arg(a) for a in x)
    if x is None or isinstance(x, (str, bool, int, float, Var)):
        return x
    if isinstance(x, (IntImm, FloatImm, StringImm)):
        return x.value
    item = getattr(x, "item", None)  # numpy scalars
    if callable(item) and getattr(x, "ndim", None) == 0:
        return item()
    raise TypeError(f"cannot use {type(x).__name__} {x!r} as a template argument "
                    "(allowed: tensors, numbers, strings, None, vars, and lists/tuples of them)")


def serialize_args(args: Sequence[Any]) -> tuple[Any, ...]:
    """Hashable, JSON-friendly form of template arguments."""
    return tuple(_encode_arg(a) for a in args)


def deserialize_args(args: Sequence[Any]) -> list[Any]:
    """Turn ``("TENSOR", shape, dtype)`` arguments back into placeholders."""
    out = []
    for a in args:
        if isinstance(a, (tuple, list)) and len(a) == 3 and a[0] == "TENSOR":
            from templtune import te

            out.append(te.placeholder(tuple(a[1]), dtype=a[2]))
        else:
            out.append(a)
    return out


def args_to_workload(args: Sequence[Any], task_name: str) -> tuple[Any, ...]:
    """``(task_name,) + serialize_args(args)``."""
    return (task_name,) + serialize_args(args)


def template(task_name: str, func: Callable[..., Any] | None = None,
             override: bool = False) -> Any:
    """Register an AutoTVM template.

    Use as ``@autotvm.template("name")``. The decorated function, when called (keyword arguments
    are not allowed, except ``epilogue`` for a template that takes a fused tail), asks the current dispatch context for a config for its workload and runs
    under :class:`ApplyConfig` of that config.

    Raises
    ------
    ValueError
        If ``task_name`` is already registered and ``override`` is False.
    """

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        if task_name in TASK_TABLE and not override:
            raise ValueError(f"an AutoTVM template named {task_name!r} is already registered "
                             "(pass override=True to replace it)")
        TASK_TABLE[task_name] = TaskTemplate(task_name, fcustomized=f)

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # NOTE: a fused epilogue (the one keyword) is not part of the workload: the anchor's
            # tuning records apply with and without it.
            if set(kwargs) - {"epilogue"}:
                raise TypeError(f"template {task_name!r} takes positional arguments only (and "
                                f"the keyword epilogue), got keywords {sorted(kwargs)}")
            workload = args_to_workload(args, task_name)
            trace_workload(workload)
            cfg = DispatchContext.current.query(current_target(allow_none=True), workload)
            with ApplyConfig(cfg):
                return f(*args, **kwargs)

        wrapper.template_name = task_name  # type: ignore[attr-defined]
        return wrapper

    return register if func is None else register(func)


def get_config() -> Any:
    """The config object of the template being run (a ConfigSpace, ConfigEntity or
    FallbackConfigEntity)."""
    return DispatchContext.current.query(current_target(allow_none=True), None)


class Task:
    """A tuning task: a template name, its serialized arguments, the collected config space,
    the FLOP count and the target.

    Attributes
    ----------
    name, args, kwargs, config_space, flop, target, target_host
        As in AutoTVM (``kwargs`` is always ``{}``).
    """

    def __init__(self, name: str, args: Sequence[Any]) -> None:
        self.name = name
        self.args = tuple(args)
        self.kwargs: dict[str, Any] = {}
        self.config_space: ConfigSpace | None = None
        self.flop: float | None = None
        self.target: Any = None
        self.target_host: Any = None
        self._func: TaskTemplate | None = None

    @property
    def func(self) -> Callable[..., Any]:
        """The registered template (raises :class:`UnknownTemplateError` when missing)."""
        f = self._func or TASK_TABLE.get(self.name)
        if f is None:
            raise _unknown(self.name)
        return f

    @property
    def workload(self) -> tuple[Any, ...]:
        """``(name,) + args``."""
        return (self.name,) + self.args

    def instantiate(self, config: Any) -> tuple[Any, list[Any]]:
        """Run the template with ``config``; returns ``(schedule, arg_tensors)``."""
        config.flop = 0
        with ApplyConfig(config), target_scope(self.target):
            sch, arg_bufs = self.func(*self.args)
        if not self.flop:
            from templtune.autotvm.flop import compute_flop

            self.flop = config.flop or compute_flop(sch)
        return sch, arg_bufs

    def __getstate__(self) -> dict[str, Any]:
        # NOTE: the template function and the space (which may hold multi_filter lambdas) go
        # through cloudpickle when available, so spawn-started workers need not import the
        # module that registered the template. Targets travel as strings.
        state: dict[str, Any] = {"name": self.name, "args": self.args, "flop": self.flop,
                 "target": None if self.target is None else str(self.target),
                 "target_host": None if self.target_host is None else str(self.target_host)}
        payload = (self._func or TASK_TABLE.get(self.name), self.config_space)
        try:
            import cloudpickle

            state["payload"] = cloudpickle.dumps(payload)
        except ImportError:
            state["payload"] = pickle.dumps(payload)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"], state["args"])  # type: ignore[misc]
        self.flop = state["flop"]
        self.target = as_target(state["target"])
        self.target_host = as_target(state["target_host"])
        self._func, self.config_space = pickle.loads(state["payload"])

    def __repr__(self) -> str:
        return (f"Task(func_name={self.name}, args={self.args}, kwargs={self.kwargs}, "
                f"workload={self.workload})")


def create(task_name: str, args: Sequence[Any], target: Any, target_host: Any = None) -> Task:
    """Create a tuning task: run template ``task_name`` on ``args`` once in collect mode.

    Parameters
    ----------
    task_name : str
        A name registered with ``@autotvm.template``.
    args : sequence
        Template arguments (tensors are serialized as ``("TENSOR", shape, dtype)``).
    target, target_host : Target or str
        The compilation target(s); the template runs inside ``with target``.

    Raises
    ------
    UnknownTemplateError
        If no template has that name (the message lists the known ones).
    """
    if task_name not in TASK_TABLE:
        raise _unknown(task_name)
    task = Task(task_name, serialize_args(args))
    task.target, task.target_host = as_target(target), as_target(target_host)
    space = ConfigSpace()
    with ApplyConfig(space), target_scope(task.target):
        sch, _ = task.func(*task.args)
    space.code_hash = getattr(sch, "code_hash", None)
    task.config_space = space
    if space.flop:
        task.flop = space.flop
    else:
        from templtune.autotvm.flop import compute_flop

        task.flop = compute_flop(sch)
    return task
