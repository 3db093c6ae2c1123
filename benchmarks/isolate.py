"""Each engine in a process of its own, for ``benchmarks/inference.py --isolate``.

In one process the engines share more than the CPUs: ONNX Runtime's and OpenVINO's libraries,
allocators and thread pools are loaded beside templtune's, and an ONNX Runtime session merely
existing has slowed templtune on some hosts (``results/inference.txt``). A user runs
one engine per process, so here each (engine, thread count) gets a spawned process that builds
the engine and answers the parent's requests over a pipe: its output once (for the check),
then the milliseconds per call of ``number`` back-to-back calls, timed inside the process. The
parent still interleaves the engines round by round and sleeps ``--settle`` between them; it
waits on the pipe (blocked, not spinning) while a child runs. A child gets the model's name and
loads it itself (:func:`models.load_model`): a zoo name, or an ONNX file's path, which its ONNX
peers then read too.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the engine of a child: templtune with the packaged log, templtune with ``--log`` too, or a
#: peer's key of :func:`peers.peer_engines`
TEMPLTUNE, TEMPLTUNE_LOG = "templtune", "templtune+log"


@dataclass(frozen=True)
class Ready:
    """A child's first reply: the engine it built, or why it could not."""

    name: str = ""
    note: str = ""
    gated: bool = True
    extra: tuple[tuple[str, str], ...] = ()
    skipped: str = ""


def model_input(net: Any, params: dict[str, np.ndarray]) -> np.ndarray:
    """The benchmark's input of ``net`` (seeded: every process draws the same one): uniform
    in [0, 1), or integer ids below the size of the table a ``take`` looks them up in."""
    data = next(v for v in net.params if v.name not in params)
    rng = np.random.default_rng(0)
    if data.dtype == "float32":
        return rng.uniform(size=data.shape).astype("float32")
    rows = [c.args[0].shape[c.attr("axis")] for c in net.calls()
            if c.op == "take" and c.args[1] is data]
    return rng.integers(0, min(rows, default=2), size=data.shape).astype(data.dtype)


def _engine(spec: str, model: str, log: str | None) -> Any:
    from models import load_model, onnx_file
    from peers import peer_engines, templtune_engine

    net, params = load_model(model)  # an ONNX file: re-imported from the same path
    x = model_input(net, params)
    if spec == TEMPLTUNE:
        return templtune_engine("templtune (packaged log)", net, params, x)
    if spec == TEMPLTUNE_LOG:
        from pathlib import Path

        return templtune_engine(f"templtune (+{Path(str(log)).name})", net, params, x, log)
    engines, skipped = peer_engines(net, params, x, (spec,), onnx_file(model))
    return engines[0] if engines else skipped[0]


def _serve(conn: Any, spec: str, model: str, log: str | None, threads: int) -> None:
    """The child: build, reply :class:`Ready`, then answer ``("out",)`` with the output and
    ``("time", n)`` with ms per call of ``n`` calls, until ``("stop",)``."""
    try:
        engine = _engine(spec, model, log)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which names it
        engine = f"{spec}: failed to build: {exc!r}"
    if isinstance(engine, str):
        conn.send(Ready(skipped=engine))
        return
    run = engine.prepare(threads)
    run()  # first-call allocations, lazy compilation
    conn.send(Ready(engine.name, engine.note, engine.gated,
                    tuple((k, str(v)) for k, v in engine.extra.items())))
    while True:
        msg = conn.recv()
        if msg[0] == "out":
            conn.send(run())
        elif msg[0] == "time":
            t = time.perf_counter()
            for _ in range(msg[1]):
                run()
            conn.send((time.perf_counter() - t) / msg[1] * 1e3)
        else:
            return


class Child:
    """The parent's handle of one engine's process: ``child()`` is the engine's output,
    ``child.timed(n)`` ms per call of ``n`` calls in the child."""

    def __init__(self, spec: str, model: str, log: str | None, threads: int) -> None:
        self.spec = spec
        ctx = mp.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(theirs, spec, model, log, threads),
                                 daemon=True)
        self._proc.start()
        theirs.close()
        try:
            self.ready: Ready = self._conn.recv()
        except EOFError:  # the child died before replying (a crash in a native library)
            self._proc.join()
            self.ready = Ready(skipped=f"{spec}: its process died (exit code "
                                      f"{self._proc.exitcode})")

    def __call__(self) -> np.ndarray:
        self._conn.send(("out",))
        out: np.ndarray = self._conn.recv()
        return out

    def timed(self, number: int) -> float:
        self._conn.send(("time", number))
        return float(self._conn.recv())

    def close(self) -> None:
        if self._proc.is_alive() and not self.ready.skipped:
            self._conn.send(("stop",))
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()


def start(specs: list[str], model: str, log: str | None, threads: int) -> list[Child]:
    """One child per spec (built one after another, so builds do not compete)."""
    return [Child(s, model, log, threads) for s in specs]
