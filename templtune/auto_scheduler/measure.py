"""Measurement of states: TVM's auto_scheduler names over the shared measurement stack.

States are measured by :mod:`templtune.measure`'s builders and runners (the same isolated worker
pool, measurement process, correctness check and error codes as AutoTVM); the auto-scheduler
supplies only :class:`~.measure_worker.StateCandidate`, how a worker rebuilds a state. Any
:class:`templtune.measure.measure.Runner` works here, the Ray ``RPCRunner`` included.
"""

from __future__ import annotations

import logging
import pickle
import sys
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from templtune.measure import local_builder as _builder
from templtune.measure import local_runner as _runner
from templtune.measure import measure as _m
from templtune.measure import rpc as _rpc

from .loop_state import State
from .measure_worker import StateCandidate

logger = logging.getLogger("auto_scheduler")

#: Cost of a failed measurement in auto_scheduler records (TVM's MAX_FLOAT placeholder).
MAX_FLOAT = _m.AUTO_SCHEDULER_ERROR_COST

#: The shared build result (fields ``artifact, error_no, error_detail`` (``error_msg``),
#: ``time_cost``, argument info).
BuildResult = _m.BuildResult

_BLOBS: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def _dag_blob(task: Any) -> bytes:
    blob = _BLOBS.get(task)
    if blob is None:
        blob = _BLOBS[task] = pickle.dumps(task.compute_dag)
    return blob


@dataclass(frozen=True, slots=True)
class MeasureInput:
    """A task and a state to measure."""

    task: Any
    state: State

    def candidate(self) -> StateCandidate:
        """The candidate a measurement worker rebuilds."""
        task = self.task
        # NOTE: measured as INSERT_TRANSFORM_STAGE even for option 2: the runner feeds the
        # weights in their original layout.
        return StateCandidate(_dag_blob(task), tuple(s.encode() for s in self.state.transform_steps),
                              str(task.target), str(task.workload_key), bool(task.is_gpu),
                              min(1, int(getattr(task, "layout_rewrite_option", 0) or 0)))


class MeasureResult(_m.MeasureResult):
    """The shared measure result with TVM auto_scheduler's constructor order
    ``(costs, error_no, error_msg, all_cost, timestamp)``."""

    __slots__ = ()

    def __init__(self, costs: Sequence[float], error_no: int, error_msg: str = "",
                 all_cost: float = 0.0, timestamp: float = 0.0, checked: bool = True,
                 infra_error: bool = False, device: str = "") -> None:
        super().__init__(tuple(costs), _m.MeasureErrorNo(int(error_no)), all_cost, timestamp,
                         error_msg, checked, infra_error, device)


def _result_text(res: MeasureResult) -> str:
    """A result as TVM prints it in verbose measurement output."""
    costs = ", ".join(f"{c:.4g}" for c in res.costs)
    err = f"error_type:{_m.MeasureErrorNo(res.error_no).name}, " if res.error_no else ""
    return (f"MeasureResult({err}cost:[{costs}], error_no:{int(res.error_no)}, "
            f"all_cost:{res.all_cost:.2f}, Tstamp:{res.timestamp:.2f})")


def _marks(verbose: int, results: Sequence[Any], ok: str, prefix: str) -> None:
    if verbose < 1:
        return
    for r in results:
        code = int(r.error_no)
        if code == 0:
            sys.stdout.write(ok)
        elif code in (_m.MeasureErrorNo.BUILD_TIMEOUT, _m.MeasureErrorNo.RUN_TIMEOUT):
            sys.stdout.write(prefix + "T")
        else:
            sys.stdout.write(prefix + "E")


class LocalBuilder(_builder.LocalBuilder):
    """Build states in ``n_parallel`` isolated worker processes (timeout each)."""

    def __init__(self, timeout: float = 15, n_parallel: int | None = None,
                 build_func: str = "default") -> None:
        super().__init__(timeout=timeout, n_parallel=n_parallel)

    def _get_pool(self) -> Any:
        if self._pool is None:
            self._pool = _builder.WorkerPool(self.n_parallel, preload=(
                *_builder.BUILD_PRELOAD, "templtune.auto_scheduler.measure_worker"))
        return self._pool

    def build(self, measure_inputs: Sequence[Any], verbose: int = 1) -> list[BuildResult]:
        res = super().build(measure_inputs, verbose)
        _marks(verbose, res, ".", ".")
        return res


def _run_states(runner: Any, run: Any, measure_inputs: Sequence[Any],
                build_results: Sequence[BuildResult], verbose: int) -> list[_m.MeasureResult]:
    """What the auto-scheduler's runners add to the shared ones' ``run``: registered task
    inputs and TVM's progress marks."""
    if measure_inputs:
        _feed_task_inputs(runner, measure_inputs[0].task)
    res = run(measure_inputs, build_results, verbose)
    _marks(verbose, res, "*", "*")
    return list(res)


class LocalRunner(_runner.LocalRunner):
    """Run built states one at a time in a restartable measurement process; outputs are
    checked against the naive schedule (TVM auto_scheduler's defaults)."""

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, device: int = 0,
                 check_correctness: bool = True) -> None:
        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        super().__init__(timeout=timeout, number=number, repeat=repeat,
                         min_repeat_ms=min_repeat_ms, cooldown_interval=cooldown_interval,
                         enable_cpu_cache_flush=enable_cpu_cache_flush,
                         check_correctness=check_correctness)

    def run(self, measure_inputs: Sequence[Any], build_results: Sequence[BuildResult],
            verbose: int = 1) -> list[_m.MeasureResult]:
        return _run_states(self, super().run, measure_inputs, build_results, verbose)


class RPCRunner(_rpc.RPCRunner):
    """Measure states on Ray nodes advertising the resource ``key`` (TVM auto_scheduler's
    ``RPCRunner`` arguments; see :class:`templtune.measure.rpc.RPCRunner`)."""

    def __init__(self, key: str, host: str | None = None, port: int | None = None,
                 priority: int = 1, n_parallel: int = 1, timeout: float = 10, number: int = 3,
                 repeat: int = 1, min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, device: int = 0) -> None:
        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        super().__init__(key, host, port, priority=priority, timeout=timeout,
                         n_parallel=n_parallel, number=number, repeat=repeat,
                         min_repeat_ms=min_repeat_ms, cooldown_interval=cooldown_interval,
                         enable_cpu_cache_flush=enable_cpu_cache_flush)

    def run(self, measure_inputs: Sequence[Any], build_results: Sequence[BuildResult],
            verbose: int = 1) -> list[_m.MeasureResult]:
        return _run_states(self, super().run, measure_inputs, build_results, verbose)


def _feed_task_inputs(runner: Any, task: Any) -> None:
    """Run ``task`` on its registered task input buffers (``SearchTask(task_inputs=...)``):
    those inputs get the registered data, the other inputs seeded random data, the outputs
    zeros. Tasks without task inputs keep the runner's own inputs."""
    import warnings

    import numpy as np

    from templtune.te.tensor import PlaceholderOp

    from .task_input import get_task_input_buffer

    names = set(getattr(task, "task_input_names", ()))
    key = (task.workload_key, str(task.target))
    if getattr(runner, "_fed_task", None) == key:
        return  # this task's inputs are in place already
    fed_before = getattr(runner, "_fed_task", None) is not None
    runner._fed_task = key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the "fixed inputs" notice
        if not names:
            if fed_before:  # undo the previous task's registered inputs, not the user's
                runner.ref_input = None
                runner._fed_task = None
            return
        _, tensors = task.compute_dag.apply_steps_from_state(task.compute_dag.get_init_state())
        rng = np.random.default_rng(0)
        arrays = []
        for t in tensors:
            shape = tuple(int(getattr(d, "value", d)) for d in t.shape)
            if t.name in names:
                arrays.append(np.ascontiguousarray(
                    np.asarray(get_task_input_buffer(task.workload_key, t.name), t.dtype)))
            elif not isinstance(t.op, PlaceholderOp) or not t.dtype.startswith("float"):
                arrays.append(np.zeros(shape, t.dtype))
            else:
                arrays.append(rng.uniform(-1, 1, shape).astype(t.dtype))
        runner.ref_input = arrays


class LocalRPCMeasureContext:
    """TVM's RPC measurement context; here a local runner (no RPC tracker) with
    ``min_repeat_ms=0`` by default, exposed as ``.runner``."""

    def __init__(self, priority: int = 1, n_parallel: int = 1, timeout: float = 10,
                 number: int = 3, repeat: int = 1, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.0, enable_cpu_cache_flush: bool = False,
                 device: int = 0) -> None:
        self.runner = LocalRunner(timeout, number, repeat, min_repeat_ms, cooldown_interval,
                                  enable_cpu_cache_flush, device)

    def __del__(self) -> None:
        try:
            self.runner.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


@dataclass
class ProgramMeasurer:
    """Measures batches of states, tracks the best per workload and calls the callbacks."""

    builder: Any
    runner: Any
    callbacks: list = field(default_factory=list)
    verbose: int = 1
    max_continuous_error: int = 150
    ct: int = 0
    error_ct: int = 0
    best_flops: dict = field(default_factory=dict)
    best_state: dict = field(default_factory=dict)
    best_ct: dict = field(default_factory=dict)
    has_valid: set = field(default_factory=set)

    def reset(self) -> None:
        self.ct = self.error_ct = 0
        self.best_flops, self.best_state, self.best_ct = {}, {}, {}
        self.has_valid = set()

    def measure(self, task: Any, policy: Any, states: list[State]) -> tuple[list, list]:
        inputs_all: list[MeasureInput] = []
        results_all: list[MeasureResult] = []
        batch = max(1, 2 * int(getattr(self.builder, "n_parallel", 1)))
        key = task.workload_key
        t0 = time.time()
        round_best, round_errors, lines = 0.0, 0, []
        for i in range(0, len(states), batch):
            inputs = [MeasureInput(task, s) for s in states[i:i + batch]]
            brs = self.builder.build(inputs, self.verbose)
            results = self.runner.run(inputs, brs, self.verbose)
            for inp, res in zip(inputs, results):
                self.ct += 1
                flops = 0.0
                if res.error_no == 0:
                    self.error_ct = 0
                    flops = task.compute_dag.flop_ct / res.mean_cost
                    self.has_valid.add(key)
                    if flops > self.best_flops.get(key, -1.0):
                        self.best_flops[key] = flops
                        self.best_state[key] = inp.state
                        self.best_ct[key] = self.ct
                else:
                    self.error_ct += 1
                    round_errors += 1
                    if self.error_ct > self.max_continuous_error:
                        self.verbose = 2
                    if self.verbose >= 2:
                        logger.warning("measure error %d: %s", res.error_no, res.error_msg[:500])
                round_best = max(round_best, flops)
                if self.verbose >= 2:  # TVM's per-measurement block
                    lines.append(f"{'=' * 50}\nNo: {self.ct}\tGFLOPS: {flops / 1e9:.2f} / "
                                 f"{self.best_flops.get(key, 0.0) / 1e9:.2f}\tresults: "
                                 f"{_result_text(res)}\n{'=' * 50}")
            for cb in self.callbacks:
                cb.callback(policy, inputs, results)
            inputs_all += inputs
            results_all += results
        if self.verbose >= 1:
            sys.stdout.write("\n" + "".join(x + "\n" for x in lines))
            # NOTE: one line per round at verbose 1: this round's best and the best so far.
            sys.stdout.write(f"No: {self.ct}\tGFLOPS: {round_best / 1e9:.2f} / "
                             f"{self.best_flops.get(key, 0.0) / 1e9:.2f}\t"
                             f"({len(results_all)} measured, {round_errors} errors)\t"
                             f"Time elapsed for measurement: {time.time() - t0:.2f} s\n")
            sys.stdout.flush()
        return inputs_all, results_all

    def close(self) -> None:
        for x in (self.builder, self.runner):
            close = getattr(x, "close", None)
            if close is not None:
                close()
