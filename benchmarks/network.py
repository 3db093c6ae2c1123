"""Whole-network inference: templtune (auto-scheduled kernels) vs PyTorch CPU, same weights.

Builds a zoo network with ``relay.build`` under ``ApplyHistoryBest(log)`` (kernels without a
record use the default schedule), runs the same network in PyTorch eager mode (the weights and
folded biases converted to NCHW/OIHW), checks both against the numpy interpreter, then times
them interleaved in rounds at 1 and 2 threads and prints medians and the ratio.

Run: ``python benchmarks/network.py [--network resnet-18] [--image 224] [--layout NCHW]
[--log LOG] [--autotvm-log LOG] [--tune-trials N] [--compare-epilogues]``. With ``--tune-trials`` the tasks are first tuned into the log
with the task scheduler (``templtune tune-network`` does the same). ``--compare-epilogues``
times, instead of PyTorch, the same network built with ``templtune.graph.fuse_epilogues``
off (each template group's element-wise tail as a second kernel).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from templtune import auto_scheduler, autotvm, graph, transform  # noqa: E402


def torch_forward(net: graph.Function, params: dict[str, np.ndarray]) -> Any:
    """A PyTorch eager function computing ``net`` (NCHW inside, whatever the graph layout)."""
    import torch
    import torch.nn.functional as F

    w = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    calls = net.calls()

    def conv(x: Any, wt: Any, c: Any) -> Any:
        a = dict(c.attrs)
        if a["data_layout"] == "NHWC":  # HWIO / HWOI -> OIHW / O1HW
            wt = wt.permute(3, 2, 0, 1) if a["groups"] == 1 else wt.permute(2, 3, 0, 1)
        pt, pl, pb, pr = a["padding"]
        if (pt, pl) != (pb, pr):
            x = F.pad(x, (pl, pr, pt, pb))
            pt = pl = 0
        return F.conv2d(x, wt.contiguous(), stride=a["strides"], padding=(pt, pl),
                        groups=a["groups"])

    def run(data: Any) -> Any:
        env: dict[int, Any] = {}
        for v in net.params:
            t = w[v.name] if v.name in w else data
            if v.name not in w and calls[0].attr("data_layout") == "NHWC":
                t = t.permute(0, 3, 1, 2)
            env[id(v)] = t
        for c in calls:
            x = [env[id(a)] for a in c.args]
            a = dict(c.attrs)
            if c.op == "nn.conv2d":
                y = conv(x[0], x[1], c)
            elif c.op == "nn.bias_add":
                y = x[0] + x[1].reshape(-1, 1, 1) if x[0].dim() == 4 else x[0] + x[1]
            elif c.op == "nn.relu":
                y = torch.relu(x[0])
            elif c.op == "add":
                y = x[0] + x[1]
            elif c.op == "nn.max_pool2d":
                y = F.max_pool2d(x[0], a["pool_size"], a["strides"], a["padding"][:2])
            elif c.op == "nn.avg_pool2d":
                y = F.avg_pool2d(x[0], a["pool_size"], a["strides"], a["padding"][:2],
                                 count_include_pad=False)
            elif c.op == "nn.global_avg_pool2d":
                y = F.adaptive_avg_pool2d(x[0], 1)
            elif c.op == "nn.batch_flatten":
                y = torch.flatten(x[0], 1)
            elif c.op == "nn.dense":
                y = F.linear(x[0], x[1])
            elif c.op == "nn.softmax":
                y = torch.softmax(x[0], dim=a["axis"])
            else:
                raise NotImplementedError(c.op)
            env[id(c)] = y
        return env[id(net.body)]

    return run


def _median_ms(fn: Any, number: int) -> float:
    t = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t) / number * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="resnet-18")
    ap.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"))
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--log", default=None, help="auto-scheduler records")
    ap.add_argument("--autotvm-log", default=None,
                    help="AutoTVM records (e.g. from templtune tune-network --method autotvm)")
    ap.add_argument("--tune-trials", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--profile", action="store_true", help="print the time of every group")
    ap.add_argument("--compare-epilogues", action="store_true",
                    help="time against the build without fused epilogues, not PyTorch")
    a = ap.parse_args()

    import torch

    shape = (3, a.image, a.image) if a.layout == "NCHW" else (a.image, a.image, 3)
    net, params, ishape, _ = graph.testing.get_network(a.network, 1, a.layout, image_shape=shape)
    log = a.log or f"logs/{a.network}-{a.layout}-B1-{a.image}.json"
    tasks, weights = auto_scheduler.extract_tasks(net, params, "llvm")
    gflop = sum(t.compute_dag.flop_ct * w for t, w in zip(tasks, weights)) / 1e9
    print(f"{a.network} {a.layout} {ishape}: {len(tasks)} tasks, {gflop:.2f} GFLOP per inference")
    if a.tune_trials:
        os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
        t0 = time.time()
        sched = auto_scheduler.TaskScheduler(
            tasks, weights, load_log_file=log if os.path.isfile(log) else None,
            callbacks=[auto_scheduler.PrintTableInfo()])
        sched.tune(auto_scheduler.TuningOptions(
            num_measure_trials=a.tune_trials,
            num_measures_per_round=max(1, min(64, a.tune_trials // len(tasks))),
            runner=auto_scheduler.LocalRunner(repeat=1, min_repeat_ms=100),
            measure_callbacks=[auto_scheduler.RecordToFile(log)], verbose=0))
        print(f"tuned {a.tune_trials} trials in {time.time() - t0:.0f} s")
    with contextlib.ExitStack() as stack:
        if os.path.isfile(log):
            stack.enter_context(auto_scheduler.ApplyHistoryBest(log))
        if a.autotvm_log:
            stack.enter_context(autotvm.apply_history_best(a.autotvm_log))
        lib = graph.build(net, "llvm", params)
        split = None
        if a.compare_epilogues:
            with transform.PassContext(config={"templtune.graph.fuse_epilogues": False}):
                split = graph.build(net, "llvm", params)
    impls = sorted({cg.impl for cg in lib.groups})
    print(f"{lib.num_tuned} of {len(lib.groups)} groups from tuning records ({log}"
          f"{', ' + a.autotvm_log if a.autotvm_log else ''}); implementations: {impls}")
    module = graph.GraphModule(lib)
    x = np.random.default_rng(0).uniform(size=ishape).astype("float32")
    module.set_input("data", x)
    module.run()
    ref = graph.evaluate(net, params, data=x)
    np.testing.assert_allclose(module.get_output(0).numpy(), ref, rtol=1e-3, atol=1e-5)
    fwd = torch_forward(net, params)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        np.testing.assert_allclose(fwd(xt).numpy(), ref, rtol=1e-3, atol=1e-5)
    print("check: templtune and PyTorch both match numpy")
    peer = "PyTorch"
    if split is not None:
        peer = "unfused"
        other = graph.GraphModule(split)
        other.set_input("data", x)
        other.run()
        np.testing.assert_allclose(other.get_output(0).numpy(), ref, rtol=1e-3, atol=1e-5)
        print(f"kernels: {sum(len(g.steps) for g in lib.groups)} with fused epilogues, "
              f"{sum(len(g.steps) for g in split.groups)} without")
        fwd = lambda _x: other.run()  # noqa: E731

    if a.profile:
        rows = module.profile()
        total = sum(r[2] for r in rows)
        print(f"{'group':48s} {'implementation':32s} {'ms':>8s} {'share':>6s}")
        for name, impl, sec in sorted(rows, key=lambda r: -r[2]):
            print(f"{name[:48]:48s} {impl[:32]:32s} {sec * 1e3:8.3f} {sec / total:6.1%}")
    for nt in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(nt)
        for cg in lib.groups + (split.groups if split is not None else []):
            for kernel in cg.kernels:
                kernel.set_num_threads(nt)
        ours, theirs = [], []
        with torch.no_grad():
            fwd(xt)
            for _ in range(a.rounds):  # interleaved: both see the same machine load
                ours.append(_median_ms(module.run, a.number))
                time.sleep(0.05)
                theirs.append(_median_ms(lambda: fwd(xt), a.number))
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(f"{nt} thread(s): templtune {mo:8.2f} ms ({gflop / mo * 1e3:6.1f} GFLOPS)   "
              f"{peer} {mt:8.2f} ms ({gflop / mt * 1e3:6.1f} GFLOPS)   ratio {mt / mo:.2f}x")


if __name__ == "__main__":
    main()
