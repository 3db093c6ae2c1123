"""The first parallel call after an idle gap, under libgomp's wait policy (a study).

A kernel is called ``--rounds`` times after ``IDLE`` seconds of sleep, each time followed by
3 calls back to back; both are summarised. The kernel is a 64K-element map with a parallel
outer loop, or with ``--model`` a zoo network built from the packaged logs (``inference.py``'s
models), which also runs 3 calls on one thread before each sleep (as ``inference.py``'s rounds
do). On a 2-vCPU KVM guest the worker woken for the first call can be queued on the caller's
vCPU (the guest sees the idle vCPU as preempted), where the caller spins at the barrier for
libgomp's spin count before it sleeps, so the call costs about the spin time. Compare
``GOMP_SPINCOUNT=1000``, ``OMP_WAIT_POLICY=passive`` or ``TEMPLTUNE_BIND_THREADS=1`` (workers
pinned one per CPU, templtune/codegen/llvm/affinity.py) set before ``python3``, all with
``TEMPLTUNE_THREAD_POOL=gomp``; templtune's own pool (the default) returns without waiting for a
worker that has not started. ``--ort`` times ONNX Runtime on the same model instead (the map as
one ``Mul`` node). Run::

    python3 benchmarks/studies/gomp_wake.py IDLE THREADS [--rounds 40] [--model conv2d-seed]
        [--ort]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import templtune
from templtune import te


def tiny_map() -> tuple[Callable[[], None], Callable[[int], None]]:
    """``(call, set_threads)`` of a 64K-element map with a parallel outer loop."""
    n = 1 << 16
    src = te.placeholder((n,), name="A")
    dst = te.compute((n,), lambda i: src[i] * 2.0, name="B")
    s = te.create_schedule(dst.op)
    outer, _ = s[dst].split(dst.op.axis[0], factor=1024)
    s[dst].parallel(outer)
    f = templtune.build(s, [src, dst], target="llvm")
    a, b = np.ones(n, np.float32), np.empty(n, np.float32)
    return (lambda: f(a, b)), f.set_num_threads


def network(name: str) -> tuple[Callable[[], None], Callable[[int], None]]:
    """``(call, set_threads)`` of a zoo network built from the packaged logs."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from inference import load_model

    from templtune import graph
    from templtune.graph.transform import PassContext

    net, params = load_model(name)
    with PassContext(opt_level=3):
        lib = graph.build(net, "llvm", params)
    gm = graph.GraphModule(lib)
    data = next(v for v in net.params if v.name not in params)
    gm.set_input(data.name, np.random.default_rng(0).standard_normal(data.shape)
                 .astype(np.float32))

    def set_threads(n: int) -> None:
        for cg in lib.groups:
            for k in cg.kernels:
                k.set_num_threads(n)
    return gm.run, set_threads


def ort_calls(model: str | None, threads: int
              ) -> tuple[Callable[[], None], Callable[[int], None]]:
    """``(call, set_threads)`` of ONNX Runtime on the map (a ``Mul`` node) or a zoo model: one
    session per thread count (a session's thread count is fixed when it is made)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from peers import ort_engine, to_onnx

    if model is None:
        from onnx import TensorProto, helper, numpy_helper

        n = 1 << 16
        g = helper.make_graph(
            [helper.make_node("Mul", ["x", "c"], ["y"])], "map",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
            [numpy_helper.from_array(np.array([2.0], np.float32), "c")])
        onnx_model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        blob, x, name = onnx_model.SerializeToString(), np.ones(n, np.float32), "x"
    else:
        from inference import load_model

        net, params = load_model(model)
        data = next(v for v in net.params if v.name not in params)
        x = np.random.default_rng(0).standard_normal(data.shape).astype(np.float32)
        blob, name = to_onnx(net, params).SerializeToString(), data.name
    engine = ort_engine(blob, x, name)
    runs = {n: engine.prepare(n) for n in {1, threads}}
    now = [runs[threads]]

    def set_threads(n: int) -> None:
        now[0] = runs[n]
    return (lambda: now[0]()), set_threads


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("idle", type=float, help="seconds of sleep before each timed call")
    ap.add_argument("threads", type=int)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--model", default=None, help="a zoo network instead of the map")
    ap.add_argument("--ort", action="store_true", help="ONNX Runtime instead of templtune")
    args = ap.parse_args()
    if args.ort:
        call, set_threads = ort_calls(args.model, args.threads)
    else:
        call, set_threads = network(args.model) if args.model else tiny_map()
    set_threads(args.threads)
    for _ in range(20):
        call()
    first, after = [], []
    for _ in range(args.rounds):
        if args.model:
            set_threads(1)
            for _ in range(3):
                call()
            set_threads(args.threads)
        time.sleep(args.idle)
        t = time.perf_counter()
        call()
        first.append(1e3 * (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(3):
            call()
        after.append(1e3 * (time.perf_counter() - t) / 3)
    out = np.array(first)
    print(f"{'ORT ' if args.ort else ''}{args.model or '64K map'}, idle {args.idle} s, {args.threads} threads: first call "
          f"median {np.median(out):.3f} ms, p90 {np.percentile(out, 90):.3f}, max "
          f"{out.max():.3f}, {int((out > 2).sum())} of {len(out)} over 2 ms; the 3 calls after "
          f"it median {np.median(after):.3f} ms")


if __name__ == "__main__":
    main()
