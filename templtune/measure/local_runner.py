"""LocalRunner: run and time built candidates one at a time in a separate measurement process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .measure import timeout_scale
from .pool import Outcome, PoolOwner, WorkerPool
from .runner import CheckingRunner
from .worker import RUN_PRELOAD

logger = logging.getLogger("templtune.measure")


class LocalRunner(PoolOwner, CheckingRunner):
    """Time candidates on this machine in one persistent measurement process.

    Candidates run one at a time (never concurrently with builds: the measure batch builds all,
    then runs all). The first call of a candidate checks its outputs and probes its speed: when
    the ``number x repeat`` timed calls clearly cannot finish within ``timeout``, the candidate is
    reported as ``RUN_TIMEOUT`` without waiting the timeout out. The process is restarted when a kernel crashes (``RUNTIME_DEVICE``) or runs
    past ``timeout`` (``RUN_TIMEOUT``). Inputs are random arrays generated once per task from
    ``seed`` (or ``ref_input`` when set) from each candidate's own argument info; with
    ``check_correctness`` every candidate's outputs (filled with NaN or another value that is
    not the reference before the call) are compared with a reference computed once per argument
    signature (the candidate's outputs built with the naive schedule, or the numpy evaluator) and
    a mismatch is ``WRONG_ANSWER`` (not timed). When the measurement process dies or hangs while
    computing the reference, set-up is retried with checking; only after the same failure twice
    are candidates measured unchecked, with a warning and ``checked=False`` in every result. A
    measurement process killed from outside (SIGKILL/SIGTERM) while running a candidate is
    restarted and the candidate run once more; a second such death gives ``infra_error``.

    The measurement process pins glibc's mmap/trim thresholds (templtune deviation, see
    :func:`~.worker._pin_scratch_allocator`; ``TEMPLTUNE_RUNNER_PIN_MALLOC=0`` turns it off), so
    a kernel's per-call scratch buffers are not page-faulted in again on every timed call.
    Kernels run with ``TEMPLTUNE_NUM_THREADS`` threads (default: all cores), as in the tuning
    process; compare hand timings at the same thread count. One ``number x repeat`` sample is
    noisy on a shared machine, so re-time the best few configs in interleaved rounds
    (``logs/rerank.py``) before trusting a ranking.

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
        Tolerances of the check, element-wise as numpy's: ``|got - ref| <= atol + rtol * |ref|``.
    module_loader : None
        TVM's hook for loading a module on a remote device; only the default (None) applies to
        a local runner.
    """

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = True,
                 seed: int = 0, rtol: float = 1e-3, atol: float = 1e-3,
                 module_loader: Any = None) -> None:
        if module_loader is not None:
            raise ValueError("LocalRunner(module_loader=...) is not supported: a local runner "
                             "loads the built module itself")
        super().__init__(timeout=timeout, n_parallel=1, number=number, repeat=repeat,
                         min_repeat_ms=min_repeat_ms, cooldown_interval=cooldown_interval,
                         enable_cpu_cache_flush=enable_cpu_cache_flush,
                         check_correctness=check_correctness, seed=seed, rtol=rtol, atol=atol)
        self._pool: WorkerPool | None = None

    def set_task(self, task: Any) -> None:
        super().set_task(task)
        self.time_scale = self._timeout_scale(task)
        # NOTE: launch the measurement process now, so that its start-up (interpreter and
        # imports) overlaps the first builds instead of following them.
        self._get_pool().spawn()

    def _timeout_scale(self, task: Any) -> int:
        return timeout_scale(task)

    def _get_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(1, preload=RUN_PRELOAD)
        return self._pool

    def _call(self, slot: int, fn: Callable[[Any], Any], req: Any,
              timeout: float | None) -> Outcome:
        return self._get_pool().call(0, fn, (req,), timeout)

    def _loaded(self, slot: int) -> list[str]:
        return self._get_pool().worker_state(0).setdefault("tokens", [])
