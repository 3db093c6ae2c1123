"""Measurement of states: builders, runners and the ProgramMeasurer.

Builds go through the AutoTVM measurement machinery's isolated worker pool
(``templtune.autotvm.measure.pool.WorkerPool``); runs go through AutoTVM's ``LocalRunner``
(one restartable measurement process, correctness checked against the naive schedule) via a
small adapter task, so both systems share one isolation model and one set of error codes.
"""

from __future__ import annotations

import logging
import pickle
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from templtune.autotvm.measure import MeasureErrorNo

from .loop_state import State

logger = logging.getLogger("auto_scheduler")

#: Cost of a failed measurement in auto_scheduler records (TVM's MAX_FLOAT placeholder).
MAX_FLOAT = 1e10


@dataclass(frozen=True, slots=True)
class MeasureInput:
    """A task and a state to measure."""

    task: Any
    state: State


@dataclass(frozen=True, slots=True)
class MeasureResult:
    """``costs`` in seconds (``[1e10]`` on failure), error code and message, wall time."""

    costs: tuple[float, ...]
    error_no: int
    error_msg: str
    all_cost: float
    timestamp: float

    @property
    def mean_cost(self) -> float:
        return float(sum(self.costs) / len(self.costs)) if self.costs else MAX_FLOAT


@dataclass(frozen=True, slots=True)
class BuildResult:
    artifact: bytes | None
    error_no: int
    error_msg: str
    time_cost: float


class _Cfg:
    """What AutoTVM's runner needs of a config: an index for its messages."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def valid(self) -> bool:
        return True


class _Space:
    range_length = 1

    def is_index_valid(self, i: int) -> bool:
        return i == 0

    def get(self, i: int) -> _Cfg:
        return _Cfg(i)


class RunnerTask:
    """Adapter exposing a SearchTask as the task AutoTVM's LocalRunner sets up: its arguments
    come from the naive schedule (the init state)."""

    def __init__(self, task: Any) -> None:
        self.name = f"auto_scheduler:{task.workload_key}"
        self.args = ()
        self.target = task.target
        self.target_host = task.target_host
        self.dag = task.compute_dag
        self.config_space = _Space()

    def instantiate(self, config: Any) -> tuple[Any, list[Any]]:
        return self.dag.apply_steps_from_state(self.dag.get_init_state())


class LocalBuilder:
    """Build states in ``n_parallel`` isolated worker processes (timeout each)."""

    def __init__(self, timeout: float = 15, n_parallel: int | None = None,
                 build_func: str = "default") -> None:
        import os

        self.timeout = timeout
        self.n_parallel = int(n_parallel or os.cpu_count() or 1)
        self._pool: Any = None

    def build(self, inputs: list[MeasureInput], verbose: int = 1) -> list[BuildResult]:
        from templtune.autotvm.measure.pool import WorkerPool

        from .measure_worker import build_state

        if not inputs:
            return []
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel, preload=(
                "templtune", "templtune.auto_scheduler.measure_worker"))
        blobs: dict[int, bytes] = {}
        jobs = []
        for inp in inputs:
            b = blobs.get(id(inp.task))
            if b is None:
                b = blobs[id(inp.task)] = pickle.dumps(inp.task.compute_dag)
            jobs.append((b, [s.encode() for s in inp.state.transform_steps],
                         str(inp.task.target), inp.task.is_gpu,
                         # NOTE: measured as INSERT_TRANSFORM_STAGE even for option 2: the
                         # runner feeds the weights in their original layout.
                         min(1, int(getattr(inp.task, "layout_rewrite_option", 0) or 0))))
        outs = self._pool.map(build_state, jobs, timeout=self.timeout)
        res = []
        for out in outs:
            if out.status == "ok":
                code, art, detail, sec = out.value
                res.append(BuildResult(art, code, detail, sec))
                mark = "." if code == 0 else ".E"
            elif out.status == "timeout":
                res.append(BuildResult(None, int(MeasureErrorNo.BUILD_TIMEOUT),
                                       f"build timed out after {self.timeout} s", self.timeout))
                mark = ".T"
            else:
                res.append(BuildResult(None, int(MeasureErrorNo.COMPILE_HOST),
                                       f"{out.status}: {out.error_type} {out.message}",
                                       out.seconds))
                mark = ".E"
            if verbose >= 1:
                sys.stdout.write(mark)
        return res

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


class LocalRunner:
    """Run built states one at a time in a restartable measurement process (AutoTVM's
    ``LocalRunner`` underneath; outputs are checked against the naive schedule)."""

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, device: int = 0,
                 check_correctness: bool = True) -> None:
        from templtune.autotvm.measure import LocalRunner as _AtvmRunner

        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        self.timeout = timeout
        self._runner = _AtvmRunner(timeout=timeout, number=number, repeat=repeat,
                                   min_repeat_ms=min_repeat_ms,
                                   cooldown_interval=cooldown_interval,
                                   enable_cpu_cache_flush=enable_cpu_cache_flush,
                                   check_correctness=check_correctness)
        self._task_key: str | None = None
        self._rtask: RunnerTask | None = None

    def run(self, inputs: list[MeasureInput], build_results: list[BuildResult],
            verbose: int = 1) -> list[MeasureResult]:
        from templtune.autotvm.measure import BuildResult as _BR
        from templtune.autotvm.measure import MeasureInput as _MI

        out = []
        for k, (inp, br) in enumerate(zip(inputs, build_results)):
            now = time.time()
            if br.error_no != 0:
                out.append(MeasureResult((MAX_FLOAT,), br.error_no, br.error_msg, br.time_cost,
                                         now))
                continue
            key = f"{inp.task.workload_key}|{inp.task.target}"
            if key != self._task_key:
                self._rtask = RunnerTask(inp.task)
                self._runner.set_task(self._rtask)
                self._task_key = key
                _feed_task_inputs(self._runner, inp.task)
            r = self._runner.run([_MI(inp.task.target, self._rtask, _Cfg(k))],
                                 [_BR(br.artifact, MeasureErrorNo.NO_ERROR, "", br.time_cost)])[0]
            if int(r.error_no) == 0:
                out.append(MeasureResult(tuple(r.costs), 0, "", r.all_cost, r.timestamp))
                mark = "*"
            else:
                out.append(MeasureResult((MAX_FLOAT,), int(r.error_no), r.error_detail[:2000],
                                         r.all_cost, r.timestamp))
                mark = "*T" if int(r.error_no) == MeasureErrorNo.RUN_TIMEOUT else "*E"
            if verbose >= 1:
                sys.stdout.write(mark)
        return out

    def close(self) -> None:
        self._runner.close()


def _feed_task_inputs(runner: Any, task: Any) -> None:
    """Run ``task`` on its registered task input buffers (``SearchTask(task_inputs=...)``):
    those inputs get the registered data, the other inputs seeded random data, the outputs
    zeros. Tasks without task inputs keep the runner's own inputs."""
    import warnings

    import numpy as np

    from templtune.te.tensor import PlaceholderOp

    from .task_input import get_task_input_buffer

    names = set(getattr(task, "task_input_names", ()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the "fixed inputs" notice
        if not names:
            if runner._user_ref_input:
                runner.ref_input = None
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
        for i in range(0, len(states), batch):
            inputs = [MeasureInput(task, s) for s in states[i:i + batch]]
            brs = self.builder.build(inputs, self.verbose)
            results = self.runner.run(inputs, brs, self.verbose)
            for inp, res in zip(inputs, results):
                self.ct += 1
                key = task.workload_key
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
                    if self.error_ct > self.max_continuous_error:
                        self.verbose = 2
                    if self.verbose >= 2:
                        logger.warning("measure error %d: %s", res.error_no, res.error_msg[:500])
            for cb in self.callbacks:
                cb.callback(policy, inputs, results)
            inputs_all += inputs
            results_all += results
        if self.verbose >= 1:
            sys.stdout.write("\n")
        return inputs_all, results_all

    def close(self) -> None:
        for x in (self.builder, self.runner):
            close = getattr(x, "close", None)
            if close is not None:
                close()
