"""Templates and helpers of the fault suite (imported by the tests and by their workers).

Fault injection is real: a thread SIGKILLs a measurement or build process by pid while that
process is inside a template (it announces itself in a marker file), or a kernel is a plain
Python object that leaves part of its output unwritten.
"""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time
from collections.abc import Callable

import numpy as np

from templtune import te
from templtune.autotvm.space import ConfigSpace
from templtune.autotvm.task.task import get_config, template

N = 16
#: The file naming the pid that should announce itself (and wait) inside the templates.
TARGET_ENV = "TEMPLTUNE_FAULT_TARGET"


def _announce() -> None:
    """In the targeted process: write our pid to ``<target>.in`` and wait to be killed."""
    path = os.environ.get(TARGET_ENV)
    if not path:
        return
    try:
        want = int(pathlib.Path(path).read_text() or 0)
    except (OSError, ValueError):
        return
    if want == os.getpid():
        with open(path + ".in", "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(3.0)


@template("faults/matmul")
def matmul(n: int):
    """A matmul whose knob ``mode`` = "zero" multiplies by 0 (a wrong kernel)."""
    cfg = get_config()
    cfg.define_knob("mode", ["ok", "zero"])
    cfg.define_knob("tile", [1, 2, 4, 8])
    _announce()
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    scale = 0.0 if cfg["mode"].val == "zero" else 1.0
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j] * scale, axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[0], factor=cfg["tile"].val)
    return s, [A, B, C]


@template("faults/exp20")
def exp20(n: int):
    """``C = exp(20 A)``; ``mode`` = "low" zeroes every element where ``A < 0.5`` (values up to
    ``exp(10)``, far below ``max|C|`` ~ ``exp(20)``)."""
    cfg = get_config()
    cfg.define_knob("mode", ["ok", "low"])
    A = te.placeholder((n, n), name="A")
    if cfg["mode"].val == "low":
        C = te.compute((n, n), lambda i, j: te.if_then_else(A[i, j] < 0.5, 0.0,
                                                            te.exp(A[i, j] * 20.0)), name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.exp(A[i, j] * 20.0), name="C")
    return te.create_schedule(C.op), [A, C]


@template("faults/relu")
def relu(n: int):
    cfg = get_config()
    cfg.define_knob("tile", [1, 2])
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: te.if_then_else(A[i] > 0.0, A[i], 0.0), name="C")
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[0], factor=cfg["tile"].val)
    return s, [A, C]


@template("faults/shapes")
def shapes(n: int):
    """Configs 0-8 cannot be instantiated; ``m`` changes the argument shapes."""
    cfg = get_config()
    cfg.define_knob("broken", list(range(9)) + [-1])
    cfg.define_knob("m", [n, 2 * n])
    if cfg["broken"].val >= 0 and not isinstance(cfg, ConfigSpace):  # raise outside collection
        raise RuntimeError(f"config {cfg['broken'].val} of this template does not build")
    m = cfg["m"].val
    A = te.placeholder((m,), name="A")
    C = te.compute((m,), lambda i: A[i] * 2.0 + 1.0, name="C")
    return te.create_schedule(C.op), [A, C]


@template("faults/slow")
def slow(n: int):
    """A kernel whose knob ``work`` sets how long one call takes (``2**work`` iterations)."""
    cfg = get_config()
    cfg.define_knob("work", [4, 29])
    _announce()
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, 1 << cfg["work"].val), name="k")
    C = te.compute((n,), lambda i: te.sum(A[(i + k) % n], axis=k), name="C")
    return te.create_schedule(C.op), [A, C]


class PartialRelu:
    """A "kernel" that writes only the positive outputs (correct where it writes)."""

    entry_name = "default_function"

    def __call__(self, a: np.ndarray, c: np.ndarray) -> None:
        c[a > 0] = a[a > 0]

    def time_evaluator(self, name, dev, number=1, repeat=1, **kwargs):
        def run(*arrays):
            t0 = time.perf_counter()
            for _ in range(number * repeat):
                self(*arrays)

            class Result:
                results = ((time.perf_counter() - t0) / max(1, number * repeat),) * repeat

            return Result()

        return run


class Killer:
    """SIGKILL a process ``times`` times, each time once it announced itself in a template.

    ``pid_of()`` names the process to target now (it changes when the process is replaced).
    """

    def __init__(self, tmp: pathlib.Path, pid_of: Callable[[], int | None], times: int,
                 sig: int = signal.SIGKILL) -> None:
        self.target = tmp / "target"
        self.target.write_text("0")
        self.pid_of, self.times, self.sig = pid_of, times, sig
        self.killed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def env(self) -> dict[str, str]:
        return {TARGET_ENV: str(self.target)}

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._aim(0)

    def _announced(self) -> set[int]:
        p = pathlib.Path(str(self.target) + ".in")
        return {int(x) for x in p.read_text().split()} if p.exists() else set()

    def _aim(self, pid: int) -> None:
        # NOTE: replace the file whole, so a template never reads it half-written.
        tmp = self.target.with_suffix(".tmp")
        tmp.write_text(str(pid))
        os.replace(tmp, self.target)

    def _loop(self) -> None:
        aimed = 0
        while not self._stop.is_set() and len(self.killed) < self.times:
            pid = self.pid_of()
            if pid and pid != aimed:
                self._aim(pid)
                aimed = pid
            if pid and pid in self._announced() and pid not in self.killed:
                os.kill(pid, self.sig)
                self.killed.append(pid)
            time.sleep(0.02)
        self._aim(0)


def pool_pid(owner, k: int = 0) -> int | None:
    """Pid of worker ``k`` of a builder's or runner's pool (None before it started)."""
    pool = getattr(owner, "_pool", None)
    workers = getattr(pool, "_workers", None) or []
    w = workers[k] if k < len(workers) else None
    return w.proc.pid if w is not None and w.proc.poll() is None else None
