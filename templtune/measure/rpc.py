"""``RPCRunner``: AutoTVM's remote runner, measuring on device machines through Ray.

TVM pairs an RPC tracker with device servers registered under a *key*; templtune uses a Ray
cluster instead (the ``[distributed]`` extra): device machines join it advertising a custom
resource named after the key, e.g. ``ray start --address=HEAD:6379 --resources='{"h200": 1}'``,
and the runner places one measurement actor per parallel slot on nodes holding that resource.
The actors run the same code as ``LocalRunner``'s measurement process (random inputs and the
naive-schedule reference prepared once per task, a checking call, the native time evaluator), so
records from both runners are comparable. A candidate that crashes its actor is
``RUNTIME_DEVICE`` and one that overruns ``timeout`` is ``RUN_TIMEOUT``; either way the actor is
replaced and tuning goes on.

``host=None`` starts (or joins) a Ray instance on this machine that advertises the key itself,
which is how the tests run it and how one machine can serve several tuning processes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from .measure import (
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    Runner,
    error_result,
)
from .worker import TaskRef, task_ref

logger = logging.getLogger("templtune.autotvm.measure")

_SETUP_TIMEOUT = 300.0


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("RPCRunner measures on remote devices through Ray; install the "
                          "'distributed' extra (pip install 'templtune[distributed]') or use "
                          "LocalRunner") from exc
    return ray


class _DeviceWorker:
    """Body of a measurement actor (wrapped with ``ray.remote`` when the runner starts)."""

    def setup(self, ref: TaskRef, seed: int, ref_input: Any, check: bool) -> dict:
        from .worker import prepare_run

        return prepare_run(ref, seed, ref_input, check)

    def load(self, token: str, state: dict) -> bool:
        from .worker import load_run_state

        load_run_state(token, state["inputs"], state["outputs"], state["reference"],
                       state["device"])
        return True

    def run(self, token: str, artifact: bytes, *timing: Any) -> tuple:
        from .worker import run_candidate

        return run_candidate(token, artifact, *timing)


class RPCRunner(Runner):
    """Time candidates on Ray nodes that advertise the resource ``key``.

    Parameters
    ----------
    key : str
        The device key: the Ray custom resource that device nodes advertise.
    host, port : str, int, optional
        Address of the Ray cluster (``ray://host:port`` for a Ray client server, else the GCS
        ``host:port``). None joins the Ray instance already running in this process, or starts
        a local one advertising ``key`` (``n_parallel`` units).
    priority : int
        Accepted for AutoTVM compatibility (Ray schedules by resources, not priorities).
    timeout : float
        Seconds allowed per candidate (load, check, timing) once it reached its actor.
    n_parallel : int, optional
        Measurement actors, i.e. candidates timed concurrently (one per device).
    number, repeat, min_repeat_ms, cooldown_interval, enable_cpu_cache_flush
        As :class:`LocalRunner`.
    check_correctness, seed, rtol, atol
        As :class:`LocalRunner`.
    """

    def __init__(self, key: str, host: str | None = None, port: int | None = None,
                 priority: int = 1, timeout: float = 10, n_parallel: int | None = None,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, enable_cpu_cache_flush: bool = False,
                 module_loader: Any = None, check_correctness: bool = True, seed: int = 0,
                 rtol: float = 1e-3, atol: float = 1e-4) -> None:
        if not key or not isinstance(key, str):
            raise ValueError(f"RPCRunner needs a device key (a Ray resource name), got {key!r}")
        if module_loader is not None:
            raise ValueError("RPCRunner: module_loader is not supported (modules travel as "
                             "object code)")
        super().__init__(timeout=timeout, n_parallel=n_parallel or 1)
        self.ray = _import_ray()
        self.key, self.host, self.port, self.priority = key, host, port, priority
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.cooldown_interval = cooldown_interval
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.check_correctness = check_correctness
        self.seed, self.rtol, self.atol = seed, rtol, atol
        self._connect()
        self._actor_cls = self.ray.remote(_DeviceWorker).options(resources={key: 1},
                                                                 num_cpus=0)
        self._actors: list[Any] = []
        self._ref: TaskRef | None = None
        self._state: Any = None  # object ref of the task's inputs/reference
        self._token = ""
        self._setup_error: str | None = None
        self._loaded: dict[int, str] = {}

    # ---- cluster -------------------------------------------------------------------------------
    def _connect(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            if self.host is None:
                ray.init(resources={self.key: self.n_parallel}, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            else:
                addr = f"{self.host}:{self.port}" if self.port else self.host
                ray.init(address=addr, log_to_driver=False, configure_logging=False)
        have = ray.cluster_resources().get(self.key, 0)
        if have < 1:
            raise RuntimeError(f"no Ray node advertises the device key {self.key!r}; start device "
                               f"nodes with: ray start --address=HEAD:6379 "
                               f"--resources='{{\"{self.key}\": 1}}'")
        if have < self.n_parallel:
            logger.warning("RPCRunner: %d parallel slots requested but only %g %r devices; "
                           "actors will wait for each other", self.n_parallel, have, self.key)

    def _actor(self, slot: int) -> Any:
        while len(self._actors) <= slot:
            self._actors.append(None)
        if self._actors[slot] is None:
            self._actors[slot] = self._actor_cls.remote()
            self._loaded.pop(slot, None)
        return self._actors[slot]

    def _replace(self, slot: int) -> None:
        actor = self._actors[slot]
        if actor is not None:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self._actors[slot] = None
        self._loaded.pop(slot, None)

    # ---- task ----------------------------------------------------------------------------------
    def set_task(self, task: Any) -> None:
        super().set_task(task)
        self._ref = task_ref(task)
        self._state, self._setup_error, self._token = None, None, ""
        self._loaded.clear()

    def _ensure_setup(self, slot: int) -> str | None:
        if self._setup_error is not None:
            return self._setup_error
        ray = self.ray
        if self._state is None:
            assert self._ref is not None
            try:
                state = ray.get(self._actor(slot).setup.remote(
                    self._ref, self.seed, None, self.check_correctness), timeout=_SETUP_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - reported once, as every candidate's error
                self._replace(slot)
                self._setup_error = (f"RPCRunner could not set up task {self._ref.name} on "
                                     f"{self.key!r}: {type(exc).__name__}: {exc}")
                return self._setup_error
            self._state = ray.put(state)
            self._token = uuid.uuid4().hex
        if self._loaded.get(slot) != self._token:
            try:
                ray.get(self._actor(slot).load.remote(self._token, self._state),
                        timeout=_SETUP_TIMEOUT)
            except Exception as exc:  # noqa: BLE001
                self._replace(slot)
                return f"RPCRunner could not load the task's buffers: {exc}"
            self._loaded[slot] = self._token
        return None

    # ---- running -------------------------------------------------------------------------------
    def run(self, measure_inputs: Sequence[MeasureInput],
            build_results: Sequence[BuildResult]) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(build_results)
        todo = []
        for k, br in enumerate(build_results):
            if br.ok:
                todo.append(k)
            else:
                results[k] = error_result(br.error_no, br.error_detail, br.time_cost, time.time())
        if todo and self.cooldown_interval > 0:
            time.sleep(self.cooldown_interval)  # once per batch, as LocalRunner
        for start in range(0, len(todo), self.n_parallel):
            wave = todo[start:start + self.n_parallel]
            pending = {}
            for slot, k in enumerate(wave):
                problem = self._ensure_setup(slot)
                if problem is not None:
                    results[k] = error_result(MeasureErrorNo.RUNTIME_DEVICE, problem,
                                              build_results[k].time_cost, time.time())
                    continue
                check = self.check_correctness
                fut = self._actor(slot).run.remote(
                    self._token, build_results[k].artifact, self.number, self.repeat,
                    self.min_repeat_ms, self.enable_cpu_cache_flush, check, self.rtol, self.atol,
                    self.timeout)
                pending[slot] = (k, fut, time.perf_counter())
            for slot, (k, fut, t0) in pending.items():
                results[k] = self._collect(slot, measure_inputs[k], build_results[k], fut, t0)
        return [r for r in results if r is not None]

    def _collect(self, slot: int, inp: MeasureInput, br: BuildResult, fut: Any,
                 t0: float) -> MeasureResult:
        ray = self.ray
        left = max(0.0, self.timeout - (time.perf_counter() - t0))
        try:
            code, costs, detail = ray.get(fut, timeout=left)
        except ray.exceptions.GetTimeoutError:
            self._replace(slot)
            return error_result(MeasureErrorNo.RUN_TIMEOUT,
                                f"config {inp.config.index}: run timed out after {self.timeout} s "
                                f"on {self.key!r}", br.time_cost + self.timeout, time.time())
        except ray.exceptions.RayActorError as exc:
            self._replace(slot)
            return error_result(MeasureErrorNo.RUNTIME_DEVICE,
                                f"config {inp.config.index}: the measurement actor on "
                                f"{self.key!r} died ({type(exc).__name__})",
                                br.time_cost + time.perf_counter() - t0, time.time())
        except ray.exceptions.RayTaskError as exc:
            return error_result(MeasureErrorNo.RUNTIME_DEVICE, f"{exc}"[:2048],
                                br.time_cost + time.perf_counter() - t0, time.time())
        total = br.time_cost + time.perf_counter() - t0
        if code != MeasureErrorNo.NO_ERROR:
            return error_result(code, f"config {inp.config.index}: {detail}", total, time.time())
        if len(costs) > 2:
            costs = tuple(sorted(costs)[1:-1])  # as LocalRunner/AutoTVM: drop the extremes
        return MeasureResult(tuple(costs), MeasureErrorNo.NO_ERROR, total, time.time())

    def close(self) -> None:
        for slot in range(len(self._actors)):
            self._replace(slot)
