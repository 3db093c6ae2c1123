"""LocalBuilder: build candidates in a pool of persistent worker processes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .measure import Builder, BuildResult, MeasureErrorNo, MeasureInput
from .pool import PoolOwner, WorkerPool
from .worker import BUILD_PRELOAD, TaskRef, build_candidate, task_ref

logger = logging.getLogger("templtune.measure")


class LocalBuilder(PoolOwner, Builder):
    """Build candidates on this machine, ``n_parallel`` at a time, in persistent workers.

    Each candidate is instantiated under the task's target and built with ``templtune.build``; the
    exported module bytes go to the runner. Workers re-create the task from its template name and
    arguments (cached per worker), so only a small task reference and a config index cross the
    process boundary. A candidate that runs past ``timeout`` kills (and later replaces) only its
    worker and is recorded as ``BUILD_TIMEOUT``; a worker that crashes is recorded as
    ``COMPILE_HOST`` (AutoTVM reports a dead build worker as ``RUNTIME_DEVICE``; templtune maps it
    to the stage that actually failed).

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
        self._ref: TaskRef | None = None

    def set_task(self, task: Any, build_kwargs: dict | None = None) -> None:
        super().set_task(task, build_kwargs)
        self._ref = task_ref(task)
        # NOTE: start the workers' interpreters now (in the background, alongside the runner's).
        self._get_pool().spawn()

    def _get_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel,
                                    preload=BUILD_PRELOAD)
        return self._pool

    def build(self, measure_inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        if not measure_inputs:
            return []
        if self._ref is None:
            raise RuntimeError("LocalBuilder.build called before set_task")
        refs = [self._ref if inp.task is self.task else task_ref(inp.task)
                for inp in measure_inputs]
        from templtune.autotvm.env import snapshot

        env = snapshot()
        jobs = [(ref, int(inp.config.index), self.build_kwargs, env)
                for ref, inp in zip(refs, measure_inputs)]
        outcomes = self._get_pool().map(build_candidate, jobs, timeout=self.timeout)
        results = []
        for inp, out in zip(measure_inputs, outcomes):
            if out.status == "ok":
                code, artifact, detail, seconds = out.value
                results.append(BuildResult(artifact, MeasureErrorNo(code), detail, seconds))
            elif out.status == "timeout":
                results.append(BuildResult(
                    None, MeasureErrorNo.BUILD_TIMEOUT,
                    f"building config {inp.config.index} timed out after {self.timeout} s",
                    float(self.timeout)))
            elif out.status == "died":
                results.append(BuildResult(
                    None, MeasureErrorNo.COMPILE_HOST,
                    f"build worker died building config {inp.config.index}: {out.message}",
                    out.seconds))
            else:
                results.append(BuildResult(
                    None, MeasureErrorNo.COMPILE_HOST,
                    f"{out.error_type}: {out.message}\n{out.traceback}", out.seconds))
        return results
