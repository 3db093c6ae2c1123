"""AutoTVM's part of measurement: its measure input and how a worker rebuilds a config.

A :class:`TemplateCandidate` is a :class:`TaskRef` (how to re-create the task) and a config
index; the shared builders and runners of :mod:`templtune.measure` do the rest.
"""

from __future__ import annotations

import importlib
import pickle
import sys
import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from templtune.autotvm.task.task import serialize_args
from templtune.errors import InstantiationError
from templtune.measure.candidate import Candidate, Instance
from templtune.measure.worker import _target_scope


@dataclass(frozen=True, slots=True)
class TaskRef:
    """How a worker re-creates a task: unpickle ``pickled`` (the task pickled whole, which keeps
    its exact config space), or else import ``module`` (which registers the template) and call
    ``autotvm.task.create(name, args, target, target_host)``."""

    module: str | None
    name: str
    args: tuple
    target: str
    target_host: str | None = None
    pickled: bytes | None = None


def _template_module(task: Any) -> str | None:
    try:
        func = task.func
    except Exception:  # noqa: BLE001 - unknown template: no module to import
        return None
    for attr in ("fcustomized", "fcompute"):
        f = getattr(func, attr, None)
        if f is not None:
            return getattr(f, "__module__", None)
    return getattr(func, "__module__", None)


def task_ref(task: Any) -> TaskRef:
    """Describe ``task`` so that a worker process can re-create it."""
    target = getattr(task, "target", None)
    host = getattr(task, "target_host", None)
    pickled = None
    try:
        pickled = pickle.dumps(task)
    except Exception:  # noqa: BLE001 - closures/lambdas: re-create by name instead
        pickled = None
    return TaskRef(_template_module(task), str(task.name), serialize_args(task.args),
                   str(target) if target is not None else "llvm",
                   str(host) if host is not None else None, pickled)


_TASKS: dict[TaskRef, Any] = {}


def get_task(ref: TaskRef) -> Any:
    """The task described by ``ref`` (cached per worker process)."""
    task = _TASKS.get(ref)
    if task is not None:
        return task
    if ref.pickled is not None:
        try:
            task = pickle.loads(ref.pickled)
            _TASKS[ref] = task
            return task
        except Exception:  # noqa: BLE001 - fall back to re-creating it by name
            task = None
    if ref.module:
        name = ref.module
        if name == "__main__":
            # NOTE: spawn workers import the parent's main script as ``__mp_main__``.
            name = "__mp_main__"
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    error: Exception | None = None
    try:
        from templtune.autotvm.task import create

        kwargs = {"target_host": ref.target_host} if ref.target_host else {}
        task = create(ref.name, ref.args, ref.target, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported below
        error = exc
    if task is None:
        raise RuntimeError(f"cannot re-create task {ref.name!r} in a measurement worker: "
                           f"{error}") from error
    _TASKS[ref] = task
    return task


@dataclass(frozen=True, slots=True)
class TemplateCandidate(Candidate):
    """Config ``index`` of the task ``ref``, instantiated under the AutoTVM switches ``env``
    (a :func:`templtune.autotvm.env.snapshot` of the tuning process)."""

    ref: TaskRef
    index: int
    env: Any = None

    def _instantiate(self, check_valid: bool) -> Instance:
        if self.env is not None:
            from templtune.autotvm.env import restore

            restore(self.env)
        task = get_task(self.ref)
        try:
            config = task.config_space.get(self.index)
        except IndexError as exc:
            raise InstantiationError(f"config index {self.index} is not in the space: "
                                     f"{exc}") from exc
        with _target_scope(task.target):
            s, args = task.instantiate(config)
        if check_valid and not config.valid():
            raise InstantiationError("; ".join(str(e) for e in config.errors) or "invalid")
        return Instance(s, list(args), task.target)

    def instantiate(self) -> Instance:
        return self._instantiate(check_valid=True)

    def reference_args(self) -> list[Any]:
        """Output tensors of the first valid config with this config's argument shapes.

        NOTE: the same config for every candidate of a signature, whichever is measured
        first; this config's own tensors when none of the first few valid configs match.
        """
        from templtune.measure.candidate import arg_info

        own = self._instantiate(check_valid=False).args
        want = arg_info(own)
        space = get_task(self.ref).config_space
        tried = 0
        for i in range(space.range_length):
            if tried >= 8:
                break
            if not space.is_index_valid(i):
                continue
            tried += 1
            try:
                args = TemplateCandidate(self.ref, i, self.env)._instantiate(check_valid=False).args
            except Exception:  # noqa: BLE001 - try the next config
                continue
            if arg_info(args) == want:
                return args
        return own

    @property
    def target(self) -> str:
        return self.ref.target

    @property
    def task_key(self) -> Hashable:
        return (self.ref.name, self.ref.args, self.ref.target)

    @property
    def label(self) -> str:
        return f"config {self.index}"


# NOTE: pickling a task (in task_ref) costs more than building a small candidate, so the
# reference of each live task object is kept while the task lives.
_REFS: weakref.WeakKeyDictionary[Any, TaskRef] = weakref.WeakKeyDictionary()


def cached_task_ref(task: Any) -> TaskRef:
    """:func:`task_ref` of ``task``, computed once per task object."""
    try:
        ref = _REFS.get(task)
    except TypeError:  # not weak-referenceable
        return task_ref(task)
    if ref is None:
        ref = _REFS[task] = task_ref(task)
    return ref


@dataclass(frozen=True, slots=True)
class MeasureInput:
    """What to measure: a target, a task and one configuration of the task's space.

    Parameters
    ----------
    target : templtune.target.Target or str
        The target the candidate is built for.
    task : templtune.autotvm.task.Task
        The tuning task.
    config : ConfigEntity
        One point of ``task.config_space``.
    """

    target: Any
    task: Any
    config: Any

    def __iter__(self):
        # NOTE: AutoTVM's MeasureInput is a namedtuple; unpacking keeps tutorials working.
        return iter((self.target, self.task, self.config))

    def candidate(self) -> TemplateCandidate:
        """The candidate a measurement worker rebuilds (under this process's AutoTVM switches)."""
        from templtune.autotvm.env import snapshot

        return TemplateCandidate(cached_task_ref(self.task), int(self.config.index), snapshot())
