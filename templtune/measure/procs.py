"""Process lifetime of measurement workers: each worker leads its own session, so it and
everything it starts (a template's subprocesses, nvcc and its cicc/ptxas) can be killed together.

Parent side: :func:`kill_session` and :func:`wait_exit` (which waits without reaping, so the
worker's pid keeps naming its session until the session is killed: the kernel does not reuse a
pid while a session or process group of that id exists). Child side: :func:`watch_parent`, which
ends the worker's session when the parent's lifeline pipe closes (the parent process exited or
was killed, whichever thread started the worker) or the parent pid changes.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

__all__ = ["end_session", "kill_session", "session_members", "wait_exit", "watch_parent"]


def session_members(sid: int) -> list[int]:
    """Pids of the live processes whose session id is ``sid`` (Linux ``/proc``; [] elsewhere)."""
    out: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command: state, ppid, pgrp, session, ...
        if len(fields) > 3 and fields[0] != b"Z" and int(fields[3]) == sid:
            out.append(int(name))
    return out


def kill_session(sid: int, *, spare: int | None = None) -> None:
    """SIGKILL every process of session ``sid`` (its process groups included), except ``spare``.

    The caller must make sure the session id still names the session it means: call it while
    the session leader is alive or an unreaped zombie (see :func:`wait_exit`).
    """
    if spare is None:
        try:
            os.killpg(sid, signal.SIGKILL)
        except OSError:  # the group is already empty, or another system's rules
            pass
    # NOTE: a member that made its own process group (nvcc is started that way, so that its own
    # timeout can kill cicc/ptxas) is not in the leader's group, but still in its session.
    for pid in session_members(sid):
        if pid != spare:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def wait_exit(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for child ``pid`` to exit, without reaping it.

    Returns True when it has exited (or is not our child any more)."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None and info.si_pid == pid:
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, 0.05)


def end_session() -> None:
    """In a worker whose parent is gone (or closed its pipe): kill the rest of the session, remove the worker's
    temporary directory, then kill the worker's own group (itself included)."""
    me = os.getpid()
    if os.getsid(0) == me:
        kill_session(me, spare=me)
    from templtune import config

    tmp = config.get("TEMPLTUNE_WORKER_TMPDIR")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        if os.getpgid(0) == me:
            os.killpg(me, signal.SIGKILL)
    finally:
        os._exit(1)


def watch_parent(parent_pid: int, lifeline_fd: int) -> None:
    """Start the threads that end this worker's session when the parent goes away.

    ``lifeline_fd`` is the read end of a pipe whose write end only the parent holds: it reads
    EOF when the parent process exits, however it dies. The parent-pid check covers a write end
    that a forked child of the parent still holds.
    """

    def lifeline() -> None:
        try:
            while os.read(lifeline_fd, 4096):
                pass
        except OSError:
            pass
        end_session()

    def watchdog() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        end_session()

    threading.Thread(target=lifeline, daemon=True, name="templtune-lifeline").start()
    threading.Thread(target=watchdog, daemon=True, name="templtune-watchdog").start()
