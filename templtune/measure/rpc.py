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
from collections.abc import Callable, Sequence
from typing import Any

from .measure import BuildResult, Measurable, MeasureErrorNo, MeasureResult, error_result
from .pool import CallStatus, Outcome
from .runner import CheckingRunner
from .worker import run_candidate

logger = logging.getLogger("templtune.measure")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("RPCRunner measures on remote devices through Ray; install the "
                          "'distributed' extra (pip install 'templtune[distributed]') or use "
                          "LocalRunner") from exc
    return ray


class _DeviceWorker:
    """Body of a measurement actor (wrapped with ``ray.remote`` when the runner starts): it runs
    the measurement process's functions of :mod:`.worker` on typed requests."""

    def call(self, fn: Callable[[Any], Any], req: Any) -> Any:
        return fn(req)


class RPCRunner(CheckingRunner):
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
                 rtol: float = 1e-3, atol: float = 1e-3) -> None:
        if not key or not isinstance(key, str):
            raise ValueError(f"RPCRunner needs a device key (a Ray resource name), got {key!r}")
        if module_loader is not None:
            raise ValueError("RPCRunner: module_loader is not supported (modules travel as "
                             "object code)")
        super().__init__(timeout=timeout, n_parallel=n_parallel or 1, number=number,
                         repeat=repeat, min_repeat_ms=min_repeat_ms,
                         cooldown_interval=cooldown_interval,
                         enable_cpu_cache_flush=enable_cpu_cache_flush,
                         check_correctness=check_correctness, seed=seed, rtol=rtol, atol=atol)
        self.ray = _import_ray()
        self.key, self.host, self.port, self.priority = key, host, port, priority
        self._connect()
        self._actor_cls = self.ray.remote(_DeviceWorker).options(resources={key: 1},
                                                                 num_cpus=0)
        self._actors: list[Any] = []
        self._tokens: dict[int, list[str]] = {}  # per slot: buffers its actor holds

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
            self._tokens.pop(slot, None)
        return self._actors[slot]

    def _replace(self, slot: int) -> None:
        actor = self._actors[slot]
        if actor is not None:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self._actors[slot] = None
        self._tokens.pop(slot, None)

    # ---- transport ---------------------------------------------------------------------------
    def _where(self) -> str:
        return f" on {self.key!r}"

    def _loaded(self, slot: int) -> list[str]:
        self._actor(slot)
        return self._tokens.setdefault(slot, [])

    def _call(self, slot: int, fn: Callable[[Any], Any], req: Any,
              timeout: float | None) -> Outcome:
        t0 = time.perf_counter()
        return self._wait(slot, self._actor(slot).call.remote(fn, req), timeout, t0)

    def _wait(self, slot: int, fut: Any, timeout: float | None, t0: float) -> Outcome:
        """The outcome of the actor call ``fut`` (the actor is replaced if it hung or died)."""
        ray = self.ray
        left = None if timeout is None else max(0.0, timeout - (time.perf_counter() - t0))
        try:
            value = ray.get(fut, timeout=left)
        except ray.exceptions.GetTimeoutError:
            self._replace(slot)
            return Outcome(CallStatus.TIMEOUT, message=f"timed out after {timeout} s",
                           seconds=time.perf_counter() - t0)
        except ray.exceptions.RayActorError as exc:
            self._replace(slot)
            return Outcome(CallStatus.DIED, message=f"the measurement actor died "
                           f"({type(exc).__name__})", seconds=time.perf_counter() - t0)
        except ray.exceptions.RayTaskError as exc:
            return Outcome(CallStatus.ERROR, error_type=type(exc).__name__,
                           message=f"{exc}"[:2048], seconds=time.perf_counter() - t0)
        return Outcome(CallStatus.OK, value, seconds=time.perf_counter() - t0)

    # ---- running -------------------------------------------------------------------------------
    def run(self, measure_inputs: Sequence[Measurable], build_results: Sequence[BuildResult],
            verbose: int = 0) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(build_results)
        todo = []
        for k, br in enumerate(build_results):
            if br.ok:
                todo.append(k)
            else:
                results[k] = self._failed_build(br)
        if todo:
            self._cooldown()  # once per batch, as LocalRunner
        for start in range(0, len(todo), self.n_parallel):
            wave = todo[start:start + self.n_parallel]
            pending = {}
            for slot, k in enumerate(wave):
                br = build_results[k]
                sig = self._ensure_setup(slot, br)
                if sig.error:
                    results[k] = error_result(MeasureErrorNo.RUNTIME_DEVICE, sig.error,
                                              br.time_cost, time.time(), False)
                    continue
                fut = self._actor(slot).call.remote(run_candidate, self._request(sig, br))
                pending[slot] = (k, sig, fut, time.perf_counter())
            for slot, (k, sig, fut, t0) in pending.items():
                out = self._wait(slot, fut, self.timeout, t0)
                results[k] = self._result(build_results[k], sig, out, time.perf_counter() - t0)
        return [r for r in results if r is not None]

    def close(self) -> None:
        for slot in range(len(self._actors)):
            self._replace(slot)
