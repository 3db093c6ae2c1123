"""One worker process of :class:`~.pool.WorkerPool`: its parent-side handle, its start-up and
request loop in the child, and the :class:`Outcome` of each call it sends back.

A worker is a fresh ``python -c`` interpreter leading its own session (see :mod:`.procs`); it
receives ``(fn, args)`` pairs and answers each with an :class:`Outcome`, never raising.
"""

from __future__ import annotations

import enum
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from templtune import config

from .procs import kill_session, wait_exit


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
         "from templtune.measure.pool_worker import _child_entry; "
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
