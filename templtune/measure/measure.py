"""Measurement data types, the Builder/Runner seams, ``measure_option`` and the measure batch.

A measurement of one candidate goes through two stages: a :class:`Builder` turns measure inputs
(anything with a ``candidate()`` method returning a :class:`~.candidate.Candidate`: AutoTVM's
``(target, task, config)``, the auto-scheduler's ``(task, state)``) into :class:`BuildResult`
objects (exported module bytes and argument info, or a structured error), and a :class:`Runner`
turns those into :class:`MeasureResult` objects. Failures never raise into the tuner loop; they
come back as data with a :class:`MeasureErrorNo` code.
"""

from __future__ import annotations

import abc
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .candidate import ArgInfo, Candidate

logger = logging.getLogger("templtune.measure")

#: Cost of a failed measurement: ``mean(costs)`` of a failure is this large number, so a failed
#: record always ranks last. AutoTVM writes the same value to its logs.
MEASURE_ERROR_COST = 1e9
#: The failure cost in each record format (TVM's numbers): AutoTVM logs ``[1e9]``, the
#: auto-scheduler logs ``[MAX_FLOAT]`` = ``[1e10]``.
AUTOTVM_ERROR_COST = MEASURE_ERROR_COST
AUTO_SCHEDULER_ERROR_COST = 1e10


class MeasureErrorNo(enum.IntEnum):
    """Error codes of a measurement (numbers as in AutoTVM)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8

    def __repr__(self) -> str:
        return f"MeasureErrorNo.{self.name}"


class Measurable(Protocol):
    """What builders and runners measure: an input that says how to rebuild its candidate."""

    def candidate(self) -> Candidate:
        """The picklable description a worker process rebuilds the schedule from."""
        ...


@dataclass(frozen=True, slots=True)
class MeasureResult:
    """The outcome of measuring one :class:`MeasureInput`.

    Parameters
    ----------
    costs : tuple of float
        Seconds per run on success. On failure ``(MEASURE_ERROR_COST,)``; the error itself is in
        ``error_detail`` (a deviation from AutoTVM, which keeps ``(traceback, exception)`` in
        ``costs`` in memory: keeping costs numeric means ``mean(costs)`` always works and the
        result stays picklable).
    error_no : MeasureErrorNo
        The error code (``NO_ERROR`` on success).
    all_cost : float
        Wall time of build plus run, in seconds.
    timestamp : float
        ``time.time()`` when the measurement finished.
    error_detail : str
        On failure: exception type name, message and traceback text; empty on success.
    checked : bool
        Whether the outputs were compared with a reference (False when the runner could not
        compute one, or checking is off); records write ``"checked": false``.
    infra_error : bool
        The failure was the infrastructure's, not the candidate's: its worker was killed from
        outside (SIGKILL/SIGTERM) twice. Such a record does not count as measured on resume.
    device : str
        The runtime that timed a GPU candidate (``"emulator"``: CPU timings from the CUDA
        emulator; ``"pycuda"``, ``"cuda-python"``: a real GPU); empty for CPU candidates and
        failures. Records write it, so a real GPU can ignore emulated timings.
    threads : int
        The threads a CPU candidate's parallel loops ran with; 0 where unknown (a failure, a
        GPU candidate, a record written before templtune logged it, or TVM's). Records write
        it (``"threads"``), so a build can prefer the records timed at its own thread count
        (:class:`~templtune.autotvm.ApplyHistoryBest`).
    """

    costs: tuple[float, ...]
    error_no: MeasureErrorNo
    all_cost: float
    timestamp: float
    error_detail: str = ""
    checked: bool = True
    infra_error: bool = False
    device: str = ""
    threads: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "costs", tuple(self.costs))
        object.__setattr__(self, "error_no", MeasureErrorNo(int(self.error_no)))

    def __iter__(self):
        # NOTE: unpacking like AutoTVM's namedtuple ``costs, error_no, all_cost, timestamp``.
        return iter((self.costs, self.error_no, self.all_cost, self.timestamp))

    def __repr__(self) -> str:
        return (
            f"MeasureResult(costs={self.costs!r}, error_no={self.error_no!r}, "
            f"all_cost={self.all_cost!r}, timestamp={self.timestamp!r})"
        )

    @property
    def ok(self) -> bool:
        """True when ``error_no == NO_ERROR``."""
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def error_msg(self) -> str:
        """The auto-scheduler's name of :attr:`error_detail`."""
        return self.error_detail

    @property
    def mean_cost(self) -> float:
        """Mean of ``costs`` (``MEASURE_ERROR_COST`` for failures)."""
        if not self.costs:
            return MEASURE_ERROR_COST
        return float(sum(self.costs) / len(self.costs))


def error_result(
    error_no: MeasureErrorNo | int, detail: str, all_cost: float, timestamp: float,
    checked: bool = True, infra_error: bool = False,
) -> MeasureResult:
    """A failed :class:`MeasureResult` with the conventional error cost."""
    return MeasureResult((MEASURE_ERROR_COST,), MeasureErrorNo(int(error_no)), float(all_cost),
                         float(timestamp), detail, checked, infra_error)


@dataclass(frozen=True, slots=True)
class BuildResult:
    """The outcome of building one candidate (picklable; crosses process boundaries).

    Parameters
    ----------
    artifact : bytes or None
        ``module.export()`` bytes on success.
    error_no : MeasureErrorNo
        ``NO_ERROR`` on success.
    error_detail : str
        Exception type name, message and traceback text on failure.
    time_cost : float
        Seconds spent building.
    arg_info : tuple of ArgInfo
        Shape, dtype and role of each argument of the built function (from this build).
    candidate : Candidate or None
        What was built; the runner rebuilds the reference computation from it.
    infra_error : bool
        The build worker was killed from outside twice (see :class:`MeasureResult`).
    """

    artifact: bytes | None
    error_no: MeasureErrorNo
    error_detail: str
    time_cost: float
    arg_info: tuple[ArgInfo, ...] = ()
    candidate: Candidate | None = None
    infra_error: bool = False

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def error_msg(self) -> str:
        """The auto-scheduler's name of :attr:`error_detail`."""
        return self.error_detail


def timeout_scale(task: Any) -> int:
    """How much longer than asked a local candidate of ``task`` may take: the
    ``TEMPLTUNE_CUDA_EMULATOR_TIMEOUT_SCALE`` factor for a GPU task whose modules run on the
    CPU emulator here, else 1."""
    from templtune import config
    from templtune.target import capabilities

    try:
        gpu = capabilities(getattr(task, "target", None) or "llvm").is_gpu
    except Exception:  # noqa: BLE001 - a task without a parsable target is measured as asked
        return 1
    if not gpu:
        return 1
    from templtune.runtime.cuda.backend import emulator_selected

    return int(config.get("TEMPLTUNE_CUDA_EMULATOR_TIMEOUT_SCALE")) if emulator_selected() else 1


def scaled_note(scale: int) -> str:
    """The words a timeout message adds when :func:`timeout_scale` stretched the timeout."""
    return f" (timeout x {scale} on the CUDA emulator)" if scale > 1 else ""


class Builder(abc.ABC):
    """Builds candidates; a seam for LocalBuilder and distributed builders.

    Parameters
    ----------
    timeout : float
        Seconds allowed per candidate.
    n_parallel : int or None
        Candidates built concurrently; ``None`` means ``os.cpu_count()``. The tuner uses it as its
        batch size.
    build_kwargs : dict or None
        Extra keyword arguments for the build.
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 build_kwargs: dict | None = None) -> None:
        import os

        from .validate import check_count, check_number

        check_number(type(self).__name__, "timeout", timeout, positive=True)
        check_count(type(self).__name__, "n_parallel", n_parallel, allow_none=True)
        self.timeout = timeout
        self.n_parallel = int(n_parallel or os.cpu_count() or 1)
        self.build_kwargs = dict(build_kwargs or {})
        self.task: Any = None
        #: factor on ``timeout`` for the current task (see :func:`timeout_scale`)
        self.time_scale = 1

    @property
    def effective_timeout(self) -> float:
        """Seconds a candidate of the current task may build for (``timeout x time_scale``)."""
        return float(self.timeout * self.time_scale)

    def set_task(self, task: Any, build_kwargs: dict | None = None) -> None:
        """Prepare for building candidates of ``task``; runner kwargs are overridden by the user's."""
        self.task = task
        merged = dict(build_kwargs or {})
        overridden = sorted(k for k in self.build_kwargs if k in merged)
        if overridden:
            logger.warning("user build_kwargs override the runner's for: %s", ", ".join(overridden))
        merged.update(self.build_kwargs)
        self.build_kwargs = merged

    @abc.abstractmethod
    def build(self, measure_inputs: Sequence[Measurable], verbose: int = 0) -> list[BuildResult]:
        """Build every input; never raises for a bad candidate."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release worker processes (optional)."""


class Runner(abc.ABC):
    """Runs built candidates and times them; a seam for LocalRunner and test doubles.

    Parameters
    ----------
    timeout : float
        Seconds allowed per candidate run.
    n_parallel : int or None
        Candidates run concurrently (LocalRunner always uses 1).
    """

    def __init__(self, timeout: float = 5, n_parallel: int | None = None) -> None:
        from .validate import check_count, check_number

        check_number(type(self).__name__, "timeout", timeout, positive=True)
        check_count(type(self).__name__, "n_parallel", n_parallel, allow_none=True)
        self.timeout = timeout
        self.n_parallel = n_parallel or 1
        self.task: Any = None
        #: factor on ``timeout`` for the current task (see :func:`timeout_scale`)
        self.time_scale = 1

    @property
    def effective_timeout(self) -> float:
        """Seconds a candidate of the current task may run for (``timeout x time_scale``)."""
        return float(self.timeout * self.time_scale)

    def set_task(self, task: Any) -> Any:
        """Prepare for running candidates of ``task``."""
        self.task = task
        return None

    def get_build_kwargs(self) -> dict:
        """Keyword arguments the builder needs for this runner's device (none by default)."""
        return {}

    @abc.abstractmethod
    def run(self, measure_inputs: Sequence[Measurable], build_results: Sequence[BuildResult],
            verbose: int = 0) -> list[MeasureResult]:
        """Run and time every built candidate; never raises for a bad candidate."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the measurement process (optional)."""


def measure_option(builder: Builder | str, runner: Runner | str) -> dict:
    """Bundle a builder and a runner for :meth:`Tuner.tune`.

    Parameters
    ----------
    builder : Builder or "local"
        ``"local"`` means ``LocalBuilder()``.
    runner : Runner or "local"
        ``"local"`` means ``LocalRunner()``.

    Returns
    -------
    dict
        ``{"builder": builder, "runner": runner}``.

    Raises
    ------
    ValueError
        For any string other than ``"local"``.
    """
    from .local_builder import LocalBuilder
    from .local_runner import LocalRunner

    builder, runner = resolve_local(builder, runner, LocalBuilder, LocalRunner)
    return {"builder": builder, "runner": runner}


def resolve_local(builder: Any, runner: Any, local_builder: Callable[[], Any],
                  local_runner: Callable[[], Any]) -> tuple[Any, Any]:
    """``"local"`` replaced by ``local_builder()`` / ``local_runner()`` (each front end passes
    its own local classes, with its own defaults); instances pass through.

    Raises
    ------
    ValueError
        For any string other than ``"local"``.
    """
    if isinstance(builder, str):
        if builder != "local":
            raise ValueError(f"invalid builder {builder!r}: use 'local' or a Builder instance")
        builder = local_builder()
    if isinstance(runner, str):
        if runner != "local":
            raise ValueError(f"invalid runner {runner!r}: use 'local' or a Runner instance")
        runner = local_runner()
    return builder, runner


class MeasureBatch:
    """``measure_batch(inputs) -> results``: build all, then run all (never overlapping).

    Attributes
    ----------
    n_parallel : int
        The builder's parallelism, used by tuners as the batch size.
    build_time, run_time : float
        Accumulated wall seconds spent in the builder and in the runner.
    """

    def __init__(self, task: Any, option: dict) -> None:
        self.builder: Builder = option["builder"]
        self.runner: Runner = option["runner"]
        self.runner.set_task(task)
        self.builder.set_task(task, self.runner.get_build_kwargs())
        self.n_parallel = self.builder.n_parallel
        self.build_time = 0.0
        self.run_time = 0.0

    def __call__(self, measure_inputs: Sequence[Measurable]) -> list[MeasureResult]:
        import time

        t0 = time.perf_counter()
        build_results = self.builder.build(measure_inputs)
        t1 = time.perf_counter()
        results = self.runner.run(measure_inputs, build_results)
        t2 = time.perf_counter()
        self.build_time += t1 - t0
        self.run_time += t2 - t1
        return results

    def close(self) -> None:
        """Release the builder's and runner's worker processes."""
        self.builder.close()
        self.runner.close()


def create_measure_batch(task: Any, option: dict) -> Callable[[Sequence[Measurable]],
                                                               list[MeasureResult]]:
    """Return a callable measuring a list of inputs of ``task`` with ``option``'s builder/runner.

    The callable has attribute ``n_parallel`` (the builder's) and a ``close()`` method.
    """
    return MeasureBatch(task, option)
