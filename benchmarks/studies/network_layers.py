"""A zoo network's convolutions (``--model``, default resnet-18) inside the network,
templtune against ONNX Runtime, one thread (``TEMPLTUNE_NUM_THREADS`` sets both engines').

Unlike a lone conv (``conv_layers.py``), each engine runs its whole network, so each conv
sees its blocked input as the previous layer left it and its weights as the previous layers
left the caches. templtune: the network built at opt_level 3 under ``--log`` (default the
packaged log), each fused group's kernels timed in place (thread CPU time) while the whole
plan runs, wall clock with more than one thread); ORT: its session profiler's per-node times (wall clock; the NCHWc transformer's
fused Conv nodes, bias, residual add and relu inside). The engines alternate, ``--runs``
network runs each; each node's minimum is reported (the least disturbed on a shared host). The convs are matched in execution order (both
engines run them in the graph's order) and checked by output size. Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/network_layers.py [--model M] [--log LOG]
        [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "1")
#: threads of both engines; with more than one, templtune's groups are timed by the wall clock
THREADS = int(os.environ["TEMPLTUNE_NUM_THREADS"])

from inference import load_model  # noqa: E402
from peers import to_onnx  # noqa: E402

import templtune  # noqa: E402
from templtune import autotvm, graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402


def templtune_groups(net, params, x, log: str | None):
    """``(run, result)``: ``run()`` runs the network once, timing each fused group in place;
    ``result()`` is ``(group name, output elements, min seconds)`` per group so far."""
    import contextlib

    with contextlib.ExitStack() as st:
        if log:
            st.enter_context(autotvm.apply_history_best(log))
        st.enter_context(PassContext(opt_level=3))
        lib = graph.build(net, "llvm", params)
    gm = graph.GraphModule(lib)
    gm.set_input(next(v.name for v in net.params if v.name not in params), x)
    gm.run()
    plan, calls, spans, j = gm.module.plan, gm.module.calls, [], 0
    for cg in lib.groups:
        spans.append((j, j + len(cg.steps)))
        j += len(cg.steps)
    best = [float("inf")] * len(spans)

    clock = time.thread_time if THREADS == 1 else time.perf_counter

    def run() -> None:
        for g, (a, b) in enumerate(spans):
            t0 = clock()
            for call in calls[a:b]:
                call()
            best[g] = min(best[g], clock() - t0)

    return run, lambda: [(cg.group.name, int(np.prod(plan[b - 1][1][-1].shape)), t)
                         for cg, (_, b), t in zip(lib.groups, spans, best)]


def ort_nodes(net, params, x):
    """``(run, result)``: ``run()`` runs the session once (profiled); ``result()`` is
    ``(node, op, output elements, min seconds)`` per node in execution order."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    sess = ort.InferenceSession(to_onnx(net, params).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    inp = next(v.name for v in net.params if v.name not in params)
    return lambda: sess.run(None, {inp: x}), lambda: _profile(sess)


def _profile(sess) -> list[tuple[str, str, int, float]]:
    events = json.loads(Path(sess.end_profiling()).read_text())
    first: dict[str, float] = {}
    best: dict[str, tuple[str, int, float]] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        shape = next(iter(e["args"]["output_type_shape"][0].values()))
        name = e["name"]
        first.setdefault(name, float(e["ts"]))
        prev = best.get(name, (e["args"]["op_name"], int(np.prod(shape)), float("inf")))
        best[name] = (prev[0], prev[1], min(prev[2], float(e["dur"]) * 1e-6))
    order = sorted(best, key=lambda n: first[n])
    return [(n, *best[n]) for n in order]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", default=None)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--model", default="resnet-18")
    a = ap.parse_args()
    net, params = load_model(a.model)
    x = np.random.default_rng(0).uniform(size=net.params[0].shape).astype("float32")
    print(f"load average {os.getloadavg()}; log {a.log or 'packaged'}; min of {a.runs} runs")
    t_run, t_res = templtune_groups(net, params, x, a.log)
    o_run, o_res = ort_nodes(net, params, x)
    for _ in range(a.runs):
        t_run()
        o_run()
    ours, theirs = t_res(), o_res()
    convs = [g for g in ours if "conv2d" in g[0]]
    oconvs = [n for n in theirs if n[1] == "Conv"]
    if len(convs) != len(oconvs) or any(c[1] != o[2] for c, o in zip(convs, oconvs)):
        raise SystemExit(f"conv lists differ: {[c[1] for c in convs]} vs "
                         f"{[o[2] for o in oconvs]}")
    print(f"{'templtune group':58s} {'tt ms':>7s} {'ORT ms':>7s} {'ORT/tt':>6s}")
    for c, o in zip(convs, oconvs):
        print(f"{c[0][:58]:58s} {c[2] * 1e3:7.3f} {o[3] * 1e3:7.3f} {o[3] / c[2]:6.2f}")
    tt, ot = sum(c[2] for c in convs), sum(o[3] for o in oconvs)
    print(f"{'all convs':58s} {tt * 1e3:7.3f} {ot * 1e3:7.3f} {ot / tt:6.2f}")
    rest_t = sum(g[2] for g in ours) - tt
    rest_o = sum(n[3] for n in theirs) - ot
    print(f"{'everything else (pooling, dense, transforms, ...)':58s} {rest_t * 1e3:7.3f} "
          f"{rest_o * 1e3:7.3f}")
    print(f"load average {os.getloadavg()}; templtune {templtune.__file__}")


if __name__ == "__main__":
    main()
