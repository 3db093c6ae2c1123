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

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from templtune import config

from .measure import BuildResult, Measurable, MeasureErrorNo, MeasureResult, error_result
from .pool import CallStatus, Outcome
from .runner import CheckingRunner
from .worker import run_candidate

logger = logging.getLogger("templtune.measure")


class _PlacementError(RuntimeError):
    """A measurement actor could not be placed on a device in time."""


def _check_reachable(addr: str, timeout: float) -> None:
    """Raise ``ConnectionError`` unless ``addr`` (``[ray://]host[:port]``) accepts a TCP
    connection within ``timeout`` s: Ray itself retries an unreachable address for minutes."""
    import socket

    hostport = addr.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        host, port = hostport, "6379"
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"RPCRunner: cannot reach the Ray cluster at {addr} within "
                              f"{timeout:g} s: {exc}") from None


def _init_within(ray: Any, addr: str, timeout: float) -> None:
    """``ray.init(address=addr)``, raising ``ConnectionError`` when it has not returned within
    ``timeout`` s. NOTE: Ray retries an endpoint that accepts TCP but does not answer for
    minutes and cannot be interrupted, so the call runs in a daemon thread that is abandoned."""
    import threading

    failure: list[BaseException] = []

    def connect() -> None:
        try:
            ray.init(address=addr, log_to_driver=False, configure_logging=False)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            failure.append(exc)

    t = threading.Thread(target=connect, daemon=True, name="templtune-ray-connect")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise ConnectionError(f"RPCRunner: the Ray cluster at {addr} did not answer within "
                              f"{timeout:g} s")
    if failure:
        raise ConnectionError(f"RPCRunner: cannot connect to the Ray cluster at {addr}: "
                              f"{type(failure[0]).__name__}: {failure[0]}") from failure[0]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("RPCRunner measures on remote devices through Ray; install the "
                          "'distributed' extra (pip install 'templtune[distributed]') or use "
                          "LocalRunner") from exc
    return ray


@contextlib.contextmanager
def _loopback_only(ray: Any) -> Iterator[None]:
    """Start a local Ray instance whose every port listens on 127.0.0.1 only.

    ``_node_ip_address="127.0.0.1"`` alone is not enough: Ray replaces a loopback node address
    by the host's routable one (``resolve_ip_for_localhost``) unless its cluster mode is off,
    and its GCS, raylet and worker gRPC servers bind to the wildcard address for any address
    but 127.0.0.1. Ray reads the switch from the environment at import, so both the variable
    (for the processes it starts) and the already-imported constant are set for the start-up.
    """
    consts: Any = getattr(getattr(ray, "_private", None), "ray_constants", None)
    saved_const = getattr(consts, "ENABLE_RAY_CLUSTER", None)
    if saved_const is not None:
        consts.ENABLE_RAY_CLUSTER = False
    try:
        with config.process_environment(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"):
            yield
    finally:
        if saved_const is not None:
            consts.ENABLE_RAY_CLUSTER = saved_const


class _DeviceWorker:
    """Body of a measurement actor (wrapped with ``ray.remote`` when the runner starts): it runs
    the measurement process's functions of :mod:`.worker` on typed requests."""

    def call(self, fn: Callable[[Any], Any], req: Any) -> Any:
        return fn(req)

    def ready(self) -> bool:
        return True


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
    connect_timeout : float
        Seconds to wait for the cluster at ``host:port`` to answer (templtune extension); an
        unreachable address raises ``ConnectionError`` after it.
    placement_timeout : float
        Seconds a new measurement actor may wait for a free device (templtune extension). Each
        batch uses at most as many actors as the cluster has ``key`` devices; an actor that
        cannot be placed in time (its node died, the devices are taken) is dropped for the
        batch and its candidates run on the remaining devices.
    """

    def __init__(self, key: str, host: str | None = None, port: int | None = None,
                 priority: int = 1, timeout: float = 10, n_parallel: int | None = None,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, enable_cpu_cache_flush: bool = False,
                 module_loader: Any = None, check_correctness: bool = True, seed: int = 0,
                 rtol: float = 1e-3, atol: float = 1e-3, connect_timeout: float = 30,
                 placement_timeout: float = 30) -> None:
        from .validate import check_number

        check_number("RPCRunner", "connect_timeout", connect_timeout, positive=True)
        check_number("RPCRunner", "placement_timeout", placement_timeout, positive=True)
        self.connect_timeout, self.placement_timeout = connect_timeout, placement_timeout
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
                with _loopback_only(ray):
                    ray.init(resources={self.key: self.n_parallel}, include_dashboard=False,
                             log_to_driver=False, configure_logging=False,
                             _node_ip_address="127.0.0.1")
            else:
                addr = f"{self.host}:{self.port}" if self.port else self.host
                _check_reachable(addr, self.connect_timeout)
                _init_within(ray, addr, self.connect_timeout)
        have = self._devices()
        if have < 1:
            raise RuntimeError(f"no Ray node advertises the device key {self.key!r}; start device "
                               f"nodes with: ray start --address=HEAD:6379 "
                               f"--resources='{{\"{self.key}\": 1}}'")
        if have < self.n_parallel:
            logger.warning("RPCRunner: %d parallel slots requested but only %g %r devices; "
                           "actors will wait for each other", self.n_parallel, have, self.key)

    def _devices(self) -> int:
        """Devices advertising ``key`` on the cluster's live nodes (asked every batch)."""
        return int(self.ray.cluster_resources().get(self.key, 0))

    def _actor(self, slot: int) -> Any:
        while len(self._actors) <= slot:
            self._actors.append(None)
        if self._actors[slot] is None:
            actor = self._actor_cls.remote()
            # NOTE: an actor that cannot be placed would make every call on it wait; find out
            # within placement_timeout instead.
            try:
                self.ray.get(actor.ready.remote(), timeout=self.placement_timeout)
            except Exception as exc:  # noqa: BLE001 - GetTimeoutError, or the node died
                try:
                    self.ray.kill(actor)
                except Exception:  # noqa: BLE001
                    pass
                raise _PlacementError(
                    f"no {self.key!r} device took a measurement actor within "
                    f"{self.placement_timeout:g} s ({type(exc).__name__}); "
                    f"{self._devices()} such devices are alive") from None
            self._actors[slot] = actor
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
        # NOTE: as many actors as there are devices now (a device node may have died, or
        # n_parallel may exceed the devices); a slot whose actor cannot be placed is dropped.
        slots = list(range(max(1, min(self.n_parallel, self._devices()))))
        for slot in range(len(slots), len(self._actors)):
            self._replace(slot)
        while todo:
            wave, todo = todo[:len(slots)], todo[len(slots):]
            pending = {}
            for slot, k in zip(list(slots), wave):
                br = build_results[k]
                try:
                    self._actor(slot)
                except _PlacementError as exc:
                    slots.remove(slot)
                    if slots:
                        todo.insert(0, k)
                    else:
                        results[k] = error_result(MeasureErrorNo.RUNTIME_DEVICE, str(exc),
                                                  br.time_cost, time.time(), False)
                    continue
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
            if not slots:  # no device left for the rest of this batch
                for k in todo:
                    results[k] = error_result(
                        MeasureErrorNo.RUNTIME_DEVICE, f"no {self.key!r} device could take a "
                        "measurement actor", build_results[k].time_cost, time.time(), False)
                break
        return [r for r in results if r is not None]

    def close(self) -> None:
        for slot in range(len(self._actors)):
            self._replace(slot)
