"""A small pool of persistent worker processes with per-call timeouts.

Unlike ``concurrent.futures.ProcessPoolExecutor``, a call that runs past its timeout kills only the
worker running it (which is replaced on next use), and a worker that dies (segfault) reports
``died`` for its call instead of breaking the whole pool. Workers are fresh interpreters: they
import templtune once and stay warm; nothing of the parent's mutable state is inherited. Killing
a worker (timeout, death, close) also kills every process it started (see :mod:`.procs`), and
workers exit, with what they started, when the parent process exits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

# NOTE: one worker process (handle, boot and request loop) lives in pool_worker; its names stay
# importable from here.
from .pool_worker import (  # noqa: F401
    _BOOT,
    EXTERNAL_SIGNALS,
    CallStatus,
    Outcome,
    _child_entry,
    _Worker,
    _worker_main,
)

logger = logging.getLogger("templtune.measure")


class WorkerPool:
    """Persistent worker processes running module-level functions with per-call timeouts.

    Parameters
    ----------
    n_workers : int
        Number of workers (started lazily, on first use, and replaced when they die or hang).
    """

    def _live(self, k: int) -> _Worker:
        """Worker ``k``, which a caller holding a job of it knows exists."""
        w = self._workers[k]
        assert w is not None
        return w

    def __init__(self, n_workers: int, preload: Sequence[str] = ()) -> None:
        self.n_workers = max(1, int(n_workers))
        self.preload = tuple(preload)
        self._workers: list[_Worker | None] = [None] * self.n_workers

    def _get(self, k: int) -> _Worker:
        w = self._workers[k]
        if w is None or not w.alive():
            if w is not None:
                w.kill()
            w = _Worker(self.preload)
            self._workers[k] = w
        # NOTE: start-up (spawn + imports) must not count against a job's timeout.
        if not w.wait_ready():
            raise RuntimeError(f"measurement worker failed to start: {w.describe_death()}")
        return w

    def spawn(self, workers: Sequence[int] | None = None) -> None:
        """Launch missing workers without waiting for them (their imports proceed in the
        background; the first call to use a worker waits for its start-up handshake)."""
        ids = list(workers) if workers is not None else list(range(self.n_workers))
        for k in ids:
            w = self._workers[k]
            if w is None or not w.alive():
                if w is not None:
                    w.kill()
                self._workers[k] = _Worker(self.preload)

    def start(self, workers: Sequence[int] | None = None) -> None:
        """Start workers now (concurrently) rather than on first use."""
        ids = list(workers) if workers is not None else list(range(self.n_workers))
        self.spawn(ids)
        for k in ids:
            self._get(k)

    def worker_state(self, k: int) -> dict[str, Any]:
        """Per-worker dict the caller can use to remember what it set up in worker ``k``."""
        return self._get(k).state

    def call(self, k: int, fn: Callable, args: tuple, timeout: float | None) -> Outcome:
        """Run ``fn(*args)`` in worker ``k`` and wait (at most ``timeout`` seconds)."""
        return self.map(fn, [args], timeout, workers=[k])[0]

    def map(self, fn: Callable, arg_list: Sequence[tuple], timeout: float | None,
            workers: Sequence[int] | None = None,
            prepare: Callable[[int], None] | None = None) -> list[Outcome]:
        """Run ``fn(*args)`` for each args tuple on the workers, in input order of the outcomes.

        ``prepare(k)`` (optional) runs in the parent before a job goes to worker ``k``; it may use
        :meth:`call` on ``k`` to set the worker up (e.g. after a replacement).
        """
        ids = list(workers) if workers is not None else list(range(self.n_workers))
        ids = ids[: max(1, len(arg_list))]
        self.start(ids)
        results: list[Outcome | None] = [None] * len(arg_list)
        pending = list(range(len(arg_list)))[::-1]
        running: dict[int, tuple[int, float]] = {}  # worker -> (job, start)
        idle = list(ids)[::-1]
        try:
            self._loop(fn, arg_list, timeout, prepare, results, pending, running, idle)
        except BaseException:
            # NOTE: interrupted (e.g. KeyboardInterrupt): a busy worker would later answer the
            # abandoned job as if it were the next one, so busy workers are replaced.
            for k in running:
                w = self._workers[k]
                if w is not None:
                    w.kill()
                    self._workers[k] = None
            raise
        return [r if r is not None else Outcome(CallStatus.DIED, message="lost") for r in results]

    def _loop(self, fn: Callable, arg_list: Sequence[tuple], timeout: float | None,
              prepare: Callable[[int], None] | None, results: list[Outcome | None],
              pending: list[int], running: dict[int, tuple[int, float]], idle: list[int]) -> None:
        while pending or running:
            while pending and idle:
                k = idle.pop()
                if prepare is not None:
                    prepare(k)
                job = pending.pop()
                w = self._get(k)
                try:
                    w.conn.send((fn, arg_list[job]))
                except (BrokenPipeError, OSError):
                    w.kill()
                    w = self._get(k)
                    if prepare is not None:
                        prepare(k)
                        w = self._get(k)
                    w.conn.send((fn, arg_list[job]))
                running[k] = (job, time.perf_counter())
            now = time.perf_counter()
            wait_for: float | None = None
            if timeout is not None:
                wait_for = max(0.0, min(start + timeout for _, start in running.values()) - now)
            handles: dict[Any, int] = {}
            for k in running:
                w = self._live(k)
                handles[w.conn] = k
            ready = wait(list(handles), timeout=wait_for)
            done: set[int] = set()
            for h in ready:
                k = handles[h]
                if k in done:
                    continue
                job, start = running[k]
                w = self._live(k)
                outcome = self._receive(w, time.perf_counter() - start)
                if outcome is None:
                    continue
                results[job] = outcome
                done.add(k)
            if timeout is not None:
                now = time.perf_counter()
                for k, (job, start) in running.items():
                    if k not in done and now - start >= timeout:
                        w = self._live(k)
                        w.kill()
                        self._workers[k] = None
                        results[job] = Outcome(CallStatus.TIMEOUT,
                                               message=f"timed out after {timeout} s",
                                               seconds=now - start)
                        done.add(k)
            for k in done:
                del running[k]
                idle.append(k)

    def _receive(self, w: _Worker, elapsed: float) -> Outcome | None:
        try:
            if not w.conn.poll():
                return None  # spurious wake-up
            out = w.conn.recv()
            assert isinstance(out, Outcome)
            return out
        except (EOFError, OSError):
            pass  # the worker is gone: its end of the socket closed
        msg = w.describe_death()
        sig = w.death_signal()
        w.kill()
        return Outcome(CallStatus.DIED, message=msg, seconds=elapsed, signal=sig)

    def close(self) -> None:
        """Stop every worker."""
        for k, w in enumerate(self._workers):
            if w is not None:
                w.kill()
                self._workers[k] = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class PoolOwner:
    """Mixin for a builder or runner holding an optional :class:`WorkerPool` in ``_pool``:
    ``close()`` shuts it down (idempotent) and garbage collection does the same."""

    _pool: WorkerPool | None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
