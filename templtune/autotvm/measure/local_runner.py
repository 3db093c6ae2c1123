"""LocalRunner: run and time built candidates one at a time in a separate measurement process."""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .measure import (
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    Runner,
    error_result,
)
from .pool import PoolOwner, WorkerPool
from .worker import RUN_PRELOAD, TaskRef, load_run_state, prepare_run, run_candidate, task_ref

logger = logging.getLogger("templtune.measure")

_SETUP_TIMEOUT = 600.0


class LocalRunner(PoolOwner, Runner):
    """Time candidates on this machine in one persistent measurement process.

    Candidates run one at a time (never concurrently with builds: the measure batch builds all,
    then runs all). The first call of a candidate checks its outputs and probes its speed: when
    the ``number x repeat`` timed calls clearly cannot finish within ``timeout``, the candidate is
    reported as ``RUN_TIMEOUT`` without waiting the timeout out. The process is restarted when a kernel crashes (``RUNTIME_DEVICE``) or runs
    past ``timeout`` (``RUN_TIMEOUT``). Inputs are random arrays generated once per task from
    ``seed`` (or ``ref_input`` when set); with ``check_correctness`` every candidate's outputs are
    compared with a reference computed once per task (the task's outputs built with the naive
    schedule, or the numpy evaluator) and a mismatch is ``WRONG_ANSWER`` (not timed).

    The measurement process pins glibc's mmap/trim thresholds (templtune deviation, see
    :func:`~.worker._pin_scratch_allocator`; ``TEMPLTUNE_RUNNER_PIN_MALLOC=0`` turns it off), so
    a kernel's per-call scratch buffers are not page-faulted in again on every timed call.
    Kernels run with ``TEMPLTUNE_NUM_THREADS`` threads (default: all cores), as in the tuning
    process; compare hand timings at the same thread count. Measured on the shared 2-core
    znver3 box (same configs, runner vs ``time_evaluator`` in the tuning process, alternating,
    1 thread): the runner agrees with hand timing within the machine's noise (0.87-1.04x,
    pinned or not, for the Winograd, direct conv2d and dense 1024^3 kernels). The 30-70% gaps
    seen before are within what one ``number x repeat`` sample shows on the loaded machine
    (the two repeats of one raw-log record differ by up to 2x) and what a different thread
    count gives (pre-tuning runs with ``TEMPLTUNE_NUM_THREADS=1``); so re-time the best few
    configs in interleaved rounds (``logs/rerank.py``) before trusting a ranking.

    Parameters
    ----------
    timeout : float
        Seconds allowed per candidate run (load, check and timing).
    number, repeat, min_repeat_ms : int, int, float
        Time-evaluator settings: ``repeat`` rounds of ``number`` calls, each round at least
        ``min_repeat_ms`` long. With more than 2 rounds the fastest and slowest are dropped.
    cooldown_interval : float
        Seconds to sleep before the runs of each batch (default 0.1 s, as AutoTVM). templtune
        deviation: AutoTVM sleeps after every candidate, which alone caps tuning below
        ``1 / cooldown_interval`` trials per second; templtune cools down once per
        :meth:`run` call, after the builds (the CPU-heavy phase) and before the batch's first
        run, and lets the candidates of a batch run back to back, each behind its own checking
        call (which also warms the kernel up). A runner called with one candidate at a time
        therefore still cools down before every candidate.
    enable_cpu_cache_flush : bool
        Flush the CPU cache before each round (if the runtime supports it).
    check_correctness : bool
        Compare outputs with the reference (default on; templtune keeps AutoTVM ≤ 0.7's option).
    seed : int
        Seed of the random inputs.
    rtol, atol : float
        Tolerances of the check; ``atol`` is scaled by the largest reference magnitude, which
        suits float32 reductions evaluated in a different order.
    module_loader : None
        TVM's hook for loading a module on a remote device; only the default (None) applies to
        a local runner.
    """

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = True,
                 seed: int = 0, rtol: float = 1e-3, atol: float = 1e-4,
                 module_loader: Any = None) -> None:
        if module_loader is not None:
            raise ValueError("LocalRunner(module_loader=...) is not supported: a local runner "
                             "loads the built module itself")
        super().__init__(timeout=timeout, n_parallel=1)
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.cooldown_interval = cooldown_interval
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.check_correctness = check_correctness
        self.seed, self.rtol, self.atol = seed, rtol, atol
        self._ref_input: list[np.ndarray] | None = None
        self._user_ref_input = False
        self._pool: WorkerPool | None = None
        self._ref: TaskRef | None = None
        self._setup: dict | None = None
        self._setup_error: str | None = None
        self._token = ""
        self.note = ""
        #: Seconds spent preparing inputs and the reference outputs (once per task).
        self.setup_time = 0.0

    # ---- ref_input (as TVM) -------------------------------------------------------------------
    @property
    def ref_input(self) -> list[np.ndarray] | None:
        """The input arrays every candidate runs on (set them to fix the inputs).

        After the first measurement of a task this holds the generated random inputs when none
        were set (output buffers appear as zero arrays).
        """
        return self._ref_input

    @ref_input.setter
    def ref_input(self, val: list[np.ndarray] | None) -> None:
        warnings.warn("ref_input is set: candidates run on these fixed inputs",
                      RuntimeWarning, stacklevel=2)
        self._ref_input = None if val is None else [np.asarray(v) for v in val]
        self._user_ref_input = val is not None
        self._setup = None
        self._setup_error = None

    # ---- runner API ----------------------------------------------------------------------------
    def set_task(self, task: Any) -> None:
        super().set_task(task)
        self._ref = task_ref(task)
        self._setup = None
        self._setup_error = None
        if not self._user_ref_input:
            self._ref_input = None
        # NOTE: launch the measurement process now, so that its start-up (interpreter and
        # imports) overlaps the first builds instead of following them.
        self._get_pool().spawn()

    def _get_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(1, preload=RUN_PRELOAD)
        return self._pool

    def _ensure_setup(self) -> str | None:
        """Make sure the measurement process holds this task's buffers (after restarts too).

        Returns None when ready, else the reason why the task cannot be measured.
        """
        if self._setup_error is not None:
            return self._setup_error
        pool = self._get_pool()
        if self._setup is None:
            assert self._ref is not None
            t0 = time.perf_counter()
            user_input = self._ref_input if self._user_ref_input else None
            out = pool.call(0, prepare_run, (self._ref, self.seed, user_input,
                                             self.check_correctness), _SETUP_TIMEOUT)
            if out.status in ("died", "timeout") and self.check_correctness:
                # NOTE: the reference computation itself crashed or hung: measure unchecked.
                logger.warning("LocalRunner %s: computing the reference failed (%s %s); "
                               "correctness is not checked", self._ref.name, out.status,
                               out.message)
                out = pool.call(0, prepare_run, (self._ref, self.seed, user_input, False),
                                _SETUP_TIMEOUT)
            self.setup_time += time.perf_counter() - t0
            if out.status != "ok":
                self._setup_error = (f"LocalRunner could not set up task {self._ref.name}: "
                                     f"{out.status} {out.error_type} {out.message}\n"
                                     f"{out.traceback}")
                return self._setup_error
            self._setup = out.value
            self.note = self._setup["note"]
            if self.check_correctness:
                logger.info("LocalRunner %s: %s", self._ref.name, self.note)
            if not self._user_ref_input:
                self._ref_input = [a.copy() for a in self._setup["inputs"]]
            self._token = uuid.uuid4().hex
        state = pool.worker_state(0)
        if state.get("token") != self._token:
            s = self._setup
            out = pool.call(0, load_run_state, (self._token, s["inputs"], s["outputs"],
                                                s["reference"], s["device"]), _SETUP_TIMEOUT)
            if out.status != "ok":
                return f"LocalRunner could not load the task's buffers: {out.message}"
            pool.worker_state(0)["token"] = self._token
        return None

    def run(self, measure_inputs: Sequence[MeasureInput],
            build_results: Sequence[BuildResult]) -> list[MeasureResult]:
        results = []
        cooled = False
        for inp, br in zip(measure_inputs, build_results):
            if not br.ok:
                results.append(error_result(br.error_no, br.error_detail, br.time_cost,
                                            time.time()))
                continue
            if not cooled and self.cooldown_interval > 0:
                # NOTE: one cooldown per batch, before its first run (templtune deviation; see
                # the class docstring).
                time.sleep(self.cooldown_interval)
            cooled = True
            results.append(self._run_one(inp, br))
        return results

    def _run_one(self, inp: MeasureInput, br: BuildResult) -> MeasureResult:
        problem = self._ensure_setup()
        if problem is not None:
            return error_result(MeasureErrorNo.RUNTIME_DEVICE, problem, br.time_cost, time.time())
        check = self.check_correctness and self._setup is not None \
            and self._setup["reference"] is not None
        t0 = time.perf_counter()
        out = self._get_pool().call(0, run_candidate, (
            self._token, br.artifact, self.number, self.repeat, self.min_repeat_ms,
            self.enable_cpu_cache_flush, check, self.rtol, self.atol, self.timeout), self.timeout)
        run_time = time.perf_counter() - t0
        now = time.time()
        if out.status == "timeout":
            return error_result(MeasureErrorNo.RUN_TIMEOUT,
                                f"config {inp.config.index}: run timed out after {self.timeout} s",
                                br.time_cost + self.timeout, now)
        if out.status == "died":
            return error_result(MeasureErrorNo.RUNTIME_DEVICE,
                                f"config {inp.config.index}: measurement process died "
                                f"({out.message})", br.time_cost + run_time, now)
        if out.status == "error":
            return error_result(MeasureErrorNo.RUNTIME_DEVICE,
                                f"{out.error_type}: {out.message[:1024]}\n{out.traceback}",
                                br.time_cost + run_time, now)
        code, costs, detail = out.value
        if code == MeasureErrorNo.RUN_TIMEOUT:
            return error_result(code, f"config {inp.config.index}: {detail}",
                                br.time_cost + run_time, now)
        if code != MeasureErrorNo.NO_ERROR:
            return error_result(code, detail, br.time_cost + run_time, now)
        if len(costs) > 2:
            # NOTE: as AutoTVM, drop the fastest and slowest round when more than 2 exist.
            costs = tuple(sorted(costs)[1:-1])
        return MeasureResult(costs, MeasureErrorNo.NO_ERROR, br.time_cost + run_time, now)
