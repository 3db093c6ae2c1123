"""A small pool of persistent worker processes with per-call timeouts.

Unlike ``concurrent.futures.ProcessPoolExecutor``, a call that runs past its timeout kills only the
worker running it (which is replaced on next use), and a worker that dies (segfault) reports
``died`` for its call instead of breaking the whole pool. Workers are fresh interpreters: they
import templtune once and stay warm; nothing of the parent's mutable state is inherited. Killing
a worker (timeout, death, close) also kills every process it started (see :mod:`.procs`), and
workers exit, with what they started, when the parent process exits.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from templtune import config

from .procs import kill_session, wait_exit

logger = logging.getLogger("templtune.measure")


class CallStatus(str, enum.Enum):
    """How a call in a worker ended (members equal their string values)."""

    OK = "ok"            # ``value`` holds the return value
    ERROR = "error"      # the function raised: ``error_type``, ``message``, ``traceback``
    TIMEOUT = "timeout"  # it ran past its timeout; the worker was killed
    DIED = "died"        # the worker exited (``message`` says how, ``signal`` by which signal)


#: Signals that kill a worker from outside (an operator, the OOM killer, a batch system): the
#: candidate did not cause them, so its measurement is retried once.
EXTERNAL_SIGNALS = (9, 15)  # SIGKILL, SIGTERM


@dataclass(frozen=True, slots=True)
class Outcome:
    """The outcome of one call in a worker (see :class:`CallStatus`)."""

    status: CallStatus
    value: Any = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    seconds: float = 0.0
    signal: int = 0  # for DIED: the signal number that killed the worker, 0 if none

    @property
    def ok(self) -> bool:
        return self.status is CallStatus.OK

    @property
    def killed_externally(self) -> bool:
        """The worker died by SIGKILL/SIGTERM (not by its own crash or our timeout)."""
        return self.status is CallStatus.DIED and self.signal in EXTERNAL_SIGNALS


def _worker_main(conn: Connection, preload: tuple[str, ...]) -> None:
    import importlib

    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the job that needs it will report the error
            pass
    conn.send("ready")
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            # NOTE: not a plain return: the interpreter would exit before the lifeline thread
            # ends the session, leaving what this worker started running (seen under load)
            from .procs import end_session

            end_session()
        t0 = time.perf_counter()
        try:
            value = fn(*args)
            out = Outcome(CallStatus.OK, value, seconds=time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - everything becomes data for the parent
            out = Outcome(CallStatus.ERROR, None, type(exc).__name__, str(exc)[:4096],
                          traceback.format_exc()[-8192:], time.perf_counter() - t0)
        try:
            conn.send(out)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable return value
            conn.send(Outcome(CallStatus.ERROR, None, type(exc).__name__,
                              f"cannot send the result: {exc}", traceback.format_exc()[-8192:],
                              time.perf_counter() - t0))


def _child_entry(fd: int, parent_pid: int, lifeline_fd: int) -> None:
    """Entry point of a worker process (started by :class:`_Worker`)."""
    import sys

    from .procs import watch_parent

    conn = Connection(fd)
    path, preload = conn.recv()
    sys.path[:] = path
    # NOTE: not PR_SET_PDEATHSIG: it fires when the *thread* that started the worker exits (a
    # short-lived thread running tune() would take the warm workers with it), and it would kill
    # the worker before the worker could end its session's other processes.
    watch_parent(parent_pid, lifeline_fd)
    _worker_main(conn, preload)


# NOTE: workers are plain ``python -c`` subprocesses, not multiprocessing "spawn" children: spawn
# re-runs the parent's main script in every worker, which breaks tutorial-style scripts without
# an ``if __name__ == "__main__"`` guard. Templates defined in a main script still reach workers
# because tasks are pickled with cloudpickle (by value).
_BOOT = ("import sys; sys.path[:0] = {path!r}; "
         "from templtune.measure.pool import _child_entry; "
         "_child_entry(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))")


class _Worker:
    """One worker process. It leads its own session (so a timeout or :meth:`kill` ends what it
    started too), has its own ``TMPDIR`` (removed with it, so files of a killed build do not
    leak) and a lifeline pipe whose write end only this object holds."""

    def __init__(self, preload: tuple[str, ...]) -> None:
        import socket
        import subprocess
        import sys
        import tempfile

        import templtune

        root = os.path.dirname(os.path.dirname(os.path.abspath(templtune.__file__)))
        ours, theirs = socket.socketpair()
        life_r, self._lifeline = os.pipe()
        self.tmpdir = tempfile.mkdtemp(prefix="templtune_worker_")
        env = config.child_environment(TMPDIR=self.tmpdir, TEMPLTUNE_WORKER_TMPDIR=self.tmpdir)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT.format(path=[root]), str(theirs.fileno()),
                 str(os.getpid()), str(life_r)],
                pass_fds=(theirs.fileno(), life_r), stdin=subprocess.DEVNULL, close_fds=True,
                start_new_session=True, env=env)
        except BaseException:
            os.close(self._lifeline)
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        finally:
            os.close(life_r)
            theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send((list(sys.path), preload))
        self.ready = False
        self.state: dict[str, Any] = {}  # what the parent has set up in this worker

    def wait_ready(self, timeout: float = 300.0) -> bool:
        """Wait for the worker's start-up handshake (imports done); False if it died."""
        if self.ready:
            return True
        try:
            if self.conn.poll(timeout) and self.conn.recv() == "ready":
                self.ready = True
        except (EOFError, OSError):
            pass
        return self.ready

    def alive(self) -> bool:
        # NOTE: never reap here: until its session is killed, the pid must keep naming it
        return self.proc.returncode is None and not wait_exit(self.proc.pid, 0)

    def _reap(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the worker to exit; once it has, kill what is left of
        its session, then collect its exit code (None while it still runs)."""
        if self.proc.returncode is None and wait_exit(self.proc.pid, timeout):
            kill_session(self.proc.pid)
            self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """Kill the worker and every process of its session; remove its ``TMPDIR``."""
        if self.proc.returncode is None:
            kill_session(self.proc.pid)
            self._reap(5)
        self.conn.close()
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __del__(self) -> None:
        # NOTE: closing the lifeline makes an abandoned worker end itself (and its session);
        # os is imported at module level because __del__ may run at interpreter shutdown
        if getattr(self, "_lifeline", -1) >= 0:
            try:
                os.close(self._lifeline)
            except OSError:
                pass
            self._lifeline = -1

    def death_signal(self) -> int:
        """The signal number that ended the worker (0 if it exited or is alive)."""
        code = self._reap(5)
        return -code if code is not None and code < 0 else 0

    def describe_death(self) -> str:
        code = self._reap(5)
        if code is not None and code < 0:
            import signal

            try:
                return f"worker killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"


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
