"""Measurement of states: builders, runners and the ProgramMeasurer.

Builds go through the AutoTVM measurement machinery's isolated worker pool
(``templtune.measure.pool.WorkerPool``); runs go through AutoTVM's ``LocalRunner``
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

from templtune.measure.measure import MeasureErrorNo

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


def _result_text(res: MeasureResult) -> str:
    """A result as TVM prints it in verbose measurement output."""
    costs = ", ".join(f"{c:.4g}" for c in res.costs)
    err = f"error_type:{MeasureErrorNo(res.error_no).name}, " if res.error_no else ""
    return (f"MeasureResult({err}cost:[{costs}], error_no:{res.error_no}, "
            f"all_cost:{res.all_cost:.2f}, Tstamp:{res.timestamp:.2f})")


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
        from templtune.measure.pool import WorkerPool

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


class _AutotvmBackedRunner:
    """Times built states with one of AutoTVM's runners (``set_task`` + ``run``), through the
    :class:`RunnerTask` adapter; outputs are checked against the naive schedule."""

    def __init__(self, runner: Any, timeout: float) -> None:
        self.timeout = timeout
        self._runner = runner
        self._task_key: str | None = None
        self._rtask: RunnerTask | None = None

    @property
    def n_parallel(self) -> int:
        return int(getattr(self._runner, "n_parallel", 1) or 1)

    def run(self, inputs: list[MeasureInput], build_results: list[BuildResult],
            verbose: int = 1) -> list[MeasureResult]:
        from templtune.autotvm.measure import BuildResult as _BR
        from templtune.autotvm.measure import MeasureInput as _MI

        out: list[MeasureResult | None] = [None] * len(inputs)
        pending: list[int] = []

        def flush() -> None:
            # NOTE: one call per run of same-task states, so a runner with several devices
            # (RPCRunner) times them concurrently.
            if not pending:
                return
            rs = self._runner.run(
                [_MI(inputs[k].task.target, self._rtask, _Cfg(k)) for k in pending],
                [_BR(build_results[k].artifact, MeasureErrorNo.NO_ERROR, "",
                     build_results[k].time_cost) for k in pending])
            for k, r in zip(pending, rs):
                if int(r.error_no) == 0:
                    out[k] = MeasureResult(tuple(r.costs), 0, "", r.all_cost, r.timestamp)
                else:
                    out[k] = MeasureResult((MAX_FLOAT,), int(r.error_no), r.error_detail[:2000],
                                           r.all_cost, r.timestamp)
            pending.clear()

        for k, (inp, br) in enumerate(zip(inputs, build_results)):
            if br.error_no != 0:
                out[k] = MeasureResult((MAX_FLOAT,), br.error_no, br.error_msg, br.time_cost,
                                       time.time())
                continue
            key = f"{inp.task.workload_key}|{inp.task.target}"
            if key != self._task_key:
                flush()
                self._rtask = RunnerTask(inp.task)
                self._runner.set_task(self._rtask)
                self._task_key = key
            pending.append(k)
        flush()
        results = [r for r in out if r is not None]
        if verbose >= 1:
            for r, br in zip(results, build_results):
                if br.error_no == 0:
                    sys.stdout.write("*" if r.error_no == 0 else
                                     "*T" if r.error_no == MeasureErrorNo.RUN_TIMEOUT else "*E")
        return results

    def close(self) -> None:
        self._runner.close()


class LocalRunner(_AutotvmBackedRunner):
    """Run built states one at a time in a restartable measurement process (AutoTVM's
    ``LocalRunner`` underneath; outputs are checked against the naive schedule)."""

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, device: int = 0,
                 check_correctness: bool = True) -> None:
        from templtune.measure.local_runner import LocalRunner as _AtvmRunner

        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        super().__init__(_AtvmRunner(timeout=timeout, number=number, repeat=repeat,
                                     min_repeat_ms=min_repeat_ms,
                                     cooldown_interval=cooldown_interval,
                                     enable_cpu_cache_flush=enable_cpu_cache_flush,
                                     check_correctness=check_correctness), timeout)


class RPCRunner(_AutotvmBackedRunner):
    """Time built states on the Ray nodes advertising the device ``key`` (AutoTVM's
    ``RPCRunner`` underneath: the ``[distributed]`` extra), ``n_parallel`` at a time.

    Parameters follow TVM's ``auto_scheduler.RPCRunner``; ``host``/``port`` name the Ray
    cluster (``ray://host`` and port for a Ray client server), None joins or starts a local
    Ray instance advertising ``key``. ``device`` is accepted for compatibility.
    """

    def __init__(self, key: str, host: str | None = None, port: int | None = None,
                 priority: int = 1, n_parallel: int = 1, timeout: float = 10,
                 number: int = 3, repeat: int = 1, min_repeat_ms: float = 100,
                 cooldown_interval: float = 0.0, enable_cpu_cache_flush: bool = False,
                 device: int = 0, check_correctness: bool = True) -> None:
        from templtune.autotvm.measure import RPCRunner as _AtvmRPCRunner

        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        super().__init__(_AtvmRPCRunner(key, host=host, port=port, priority=priority,
                                        timeout=timeout, n_parallel=n_parallel, number=number,
                                        repeat=repeat, min_repeat_ms=min_repeat_ms,
                                        cooldown_interval=cooldown_interval,
                                        enable_cpu_cache_flush=enable_cpu_cache_flush,
                                        check_correctness=check_correctness), timeout)


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
                    round_errors += 1
                    self.error_ct += 1
                    if self.error_ct > self.max_continuous_error:
                        self.verbose = 2
                    if self.verbose >= 2:
                        logger.warning("measure error %d: %s", res.error_no, res.error_msg[:500])
                round_best = max(round_best, flops)
                if self.verbose >= 2:  # TVM's per-measurement block
                    lines.append(f"{'=' * 50}\nNo: {self.ct}\tGFLOPS: {flops / 1e9:.2f} / "
                                 f"{self.best_flops.get(key, 0.0) / 1e9:.2f}\tresults: {_result_text(res)}\n"
                                 f"{'=' * 50}")
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
