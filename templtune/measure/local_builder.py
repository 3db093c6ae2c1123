"""LocalBuilder: build candidates in a pool of persistent worker processes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .measure import Builder, BuildResult, Measurable, MeasureErrorNo, timeout_scale
from .measure import scaled_note as _scaled
from .pool import CallStatus, Outcome, PoolOwner, WorkerPool
from .worker import BUILD_PRELOAD, BuildReply, BuildRequest, build_candidate

logger = logging.getLogger("templtune.measure")


class LocalBuilder(PoolOwner, Builder):
    """Build candidates on this machine, ``n_parallel`` at a time, in persistent workers.

    Each input's candidate (``inp.candidate()``) is rebuilt in a worker and built with
    ``templtune.build``; the exported module bytes and the argument info go to the runner. Only
    the small candidate crosses the process boundary (workers cache what it refers to). A
    candidate that runs past ``timeout`` kills (and later replaces) only its worker and is
    recorded as ``BUILD_TIMEOUT``; a worker that crashes is recorded as ``COMPILE_HOST``
    (AutoTVM reports a dead build worker as ``RUNTIME_DEVICE``; templtune maps it to the stage
    that actually failed). A worker killed from outside (SIGKILL/SIGTERM) is retried once; a
    second such death is recorded with ``infra_error``.

    Parameters
    ----------
    timeout : float
        Seconds allowed per candidate.
    n_parallel : int or None
        Worker processes (and the tuner's batch size); ``None``: ``os.cpu_count()``.
    build_kwargs : dict or None
        Extra keyword arguments for ``templtune.build``.
    build_func : str
        TVM's ``build_func``: only ``"default"`` (templtune passes built modules to the runner
        in memory, so there is no library file to package with ``"ndk"`` or a custom linker).
    do_fork : bool
        Accepted for TVM compatibility; builds always run in isolated worker processes.
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 build_kwargs: dict | None = None, build_func: Any = "default",
                 do_fork: bool = False) -> None:
        if build_func != "default":
            raise ValueError(f"LocalBuilder(build_func={build_func!r}) is not supported: "
                             "templtune hands built modules to the runner in memory; use "
                             "'default'")
        super().__init__(timeout=timeout, n_parallel=n_parallel, build_kwargs=build_kwargs)
        self._pool: WorkerPool | None = None

    def set_task(self, task: Any, build_kwargs: dict | None = None) -> None:
        super().set_task(task, build_kwargs)
        self.time_scale = timeout_scale(task)
        # NOTE: start the workers' interpreters now (in the background, alongside the runner's).
        self._get_pool().spawn()

    def _get_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel, preload=BUILD_PRELOAD)
        return self._pool

    def build(self, measure_inputs: Sequence[Measurable], verbose: int = 0) -> list[BuildResult]:
        if not measure_inputs:
            return []
        # NOTE: per batch, not only in set_task: the auto-scheduler's measurer never calls it
        self.time_scale = timeout_scale(getattr(measure_inputs[0], "task", None))
        cands = [inp.candidate() for inp in measure_inputs]
        jobs = [(BuildRequest(c, self.build_kwargs),) for c in cands]
        outcomes = self._get_pool().map(build_candidate, jobs, timeout=self.effective_timeout)
        again = [k for k, out in enumerate(outcomes) if out.killed_externally]
        if again:
            logger.warning("LocalBuilder: %d build worker(s) killed from outside (%s); building "
                           "those candidates again", len(again), outcomes[again[0]].message)
            retried = self._get_pool().map(build_candidate, [jobs[k] for k in again],
                                           timeout=self.effective_timeout)
            for k, out in zip(again, retried):
                outcomes[k] = out
        return [self._result(c, out) for c, out in zip(cands, outcomes)]

    def _result(self, cand: Any, out: Outcome) -> BuildResult:
        if out.status is CallStatus.OK:
            r: BuildReply = out.value
            return BuildResult(r.artifact, r.error_no, r.detail, r.seconds, r.arg_info, cand)
        if out.status is CallStatus.TIMEOUT:
            return BuildResult(None, MeasureErrorNo.BUILD_TIMEOUT,
                               f"building {cand.label} timed out after {self.effective_timeout:g} s"
                               f"{_scaled(self.time_scale)}", self.effective_timeout,
                               candidate=cand)
        if out.status is CallStatus.DIED:
            return BuildResult(None, MeasureErrorNo.COMPILE_HOST,
                               f"build worker died building {cand.label}: {out.message}",
                               out.seconds, candidate=cand, infra_error=out.killed_externally)
        return BuildResult(None, MeasureErrorNo.COMPILE_HOST,
                           f"{out.error_type}: {out.message}\n{out.traceback}", out.seconds,
                           candidate=cand)
