"""What crosses into a measurement worker: a picklable candidate and its argument info.

AutoTVM and the auto-scheduler each supply one :class:`Candidate` subclass saying how a worker
process rebuilds the schedule (AutoTVM: a task reference and a config index; the auto-scheduler:
a pickled DAG and transform steps). Everything else (building, error codes, the reference, the
check, the timing) is shared.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Instance:
    """A rebuilt candidate: its schedule, its argument tensors and the target to build for."""

    schedule: Any
    args: list[Any]
    target: Any


@dataclass(frozen=True, slots=True)
class ArgInfo:
    """One argument of a built function: its shape, dtype and whether the function writes it."""

    shape: tuple[int, ...]
    dtype: str
    is_output: bool


class Candidate(abc.ABC):
    """How a worker process rebuilds one schedule (small and picklable).

    Subclasses are frozen dataclasses. :meth:`instantiate` raises
    :class:`templtune.errors.InstantiationError` for a candidate that is not a valid schedule.
    """

    @abc.abstractmethod
    def instantiate(self) -> Instance:
        """Rebuild the schedule and its arguments (in the worker process)."""

    def reference_args(self) -> list[Any]:
        """Argument tensors whose naive schedule computes the reference outputs."""
        return list(self.instantiate().args)

    @property
    @abc.abstractmethod
    def target(self) -> str:
        """The target string the candidate is built for."""

    @property
    @abc.abstractmethod
    def task_key(self) -> Hashable:
        """Candidates with equal keys compute the same function (they share a reference)."""

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """Short name of the candidate for messages (``"config 17"``)."""


def arg_info(args: Sequence[Any]) -> tuple[ArgInfo, ...]:
    """The :class:`ArgInfo` of each argument tensor (outputs are the non-placeholders)."""
    from templtune.te.tensor import PlaceholderOp

    return tuple(ArgInfo(tuple(int(getattr(s, "value", s)) for s in t.shape), str(t.dtype),
                         not isinstance(t.op, PlaceholderOp)) for t in args)


def is_device_target(target: Any) -> bool:
    """Whether ``target`` (a Target or a target string) is a GPU target."""
    kind = getattr(target, "kind", None)
    name = getattr(kind, "name", kind)
    return str(name if name is not None else target).split()[0] in ("cuda", "nvptx", "rocm")
