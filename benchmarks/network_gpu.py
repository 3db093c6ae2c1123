"""Whole networks on an NVIDIA GPU: templtune vs PyTorch eager on cuDNN fp32, same weights.

For each network (default resnet-18 and resnet-50, batch 1, 224x224, NCHW), builds it with
``relay.build(..., target="cuda")`` under the given records (auto-scheduler ``--log``, AutoTVM
``--autotvm-log``; groups without one use template fallbacks or the default GPU schedules),
optionally after tuning ``--tune-trials`` auto-scheduler trials on this GPU, runs the same
network in PyTorch eager mode on cuDNN with TF32 disabled
(``torch.backends.cudnn.allow_tf32 = False``, ``torch.backends.cuda.matmul.allow_tf32 =
False``), checks both outputs against the numpy interpreter, then times them in interleaved
rounds (CUDA events on both sides) and prints medians and the ratio PyTorch time / templtune
time (above 1: templtune is faster).

Run on a GPU machine: ``python benchmarks/network_gpu.py [--network resnet-18,resnet-50]
[--image 224] [--log LOG] [--autotvm-log LOG] [--tune-trials N] [--json OUT.json]``.
Without a GPU the script refuses (CPU emulator timings say nothing about a GPU);
``--dry-run`` then only builds each network, runs it once on the emulator and checks it
(use a small ``--image``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import templtune  # noqa: E402
from templtune import auto_scheduler, autotvm, graph, relay, transform  # noqa: E402
from templtune.runtime.cuda.backend import device_exists  # noqa: E402


def _torch_forward() -> Any:
    """``torch_forward`` of the CPU network benchmark (one definition of the PyTorch net)."""
    spec = importlib.util.spec_from_file_location("network_bench",
                                                  Path(__file__).with_name("network.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.torch_forward


def _tune(tasks: list, weights: list, log: str, trials: int) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    t0 = time.time()
    sched = auto_scheduler.TaskScheduler(
        tasks, weights, load_log_file=log if os.path.isfile(log) else None,
        callbacks=[auto_scheduler.PrintTableInfo()])
    sched.tune(auto_scheduler.TuningOptions(
        num_measure_trials=trials,
        num_measures_per_round=max(1, min(64, trials // len(tasks))),
        runner=auto_scheduler.LocalRunner(repeat=1, min_repeat_ms=100, timeout=10),
        measure_callbacks=[auto_scheduler.RecordToFile(log)], verbose=0))
    print(f"tuned {trials} trials in {(time.time() - t0) / 60:.1f} min")


def _build(net: Any, params: dict, log: str, autotvm_log: str | None) -> Any:
    with contextlib.ExitStack() as stack:
        if os.path.isfile(log):
            stack.enter_context(auto_scheduler.ApplyHistoryBest(log))
        if autotvm_log:
            stack.enter_context(autotvm.apply_history_best(autotvm_log))
        stack.enter_context(transform.PassContext(
            opt_level=3, config={"relay.backend.use_auto_scheduler": True}))
        return relay.build(net, target="cuda", params=params)


def _torch_round(fwd: Any, xt: Any, number: int) -> float:
    """Seconds per call of ``number`` back-to-back calls, between two CUDA events."""
    import torch

    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(number):
        fwd(xt)
    en.record()
    torch.cuda.synchronize()
    return st.elapsed_time(en) / 1e3 / number


def bench_network(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """Build, check and (unless ``--dry-run``) time one network; returns its summary."""
    net, params, ishape, _ = graph.testing.get_network(name, 1, "NCHW",
                                                       image_shape=(3, a.image, a.image))
    log = a.log or f"logs/{name}-NCHW-B1-{a.image}-cuda.json"
    tasks, weights = auto_scheduler.extract_tasks(net, params, "cuda")
    gflop = sum(t.compute_dag.flop_ct * w for t, w in zip(tasks, weights)) / 1e9
    print(f"== {name} {ishape}: {len(tasks)} tasks, {gflop:.2f} GFLOP per inference")
    out: dict[str, Any] = {"network": name, "image": a.image, "gflop": gflop}
    if a.tune_trials and not a.dry_run:
        _tune(tasks, weights, log, a.tune_trials)
        out["tune_trials"] = a.tune_trials
    t0 = time.time()
    lib = _build(net, params, log, a.autotvm_log)
    impls: dict[str, int] = {}
    for cg in lib.groups:
        impls[cg.impl.split(":")[0]] = impls.get(cg.impl.split(":")[0], 0) + 1
    out.update(build_s=time.time() - t0, groups=len(lib.groups), tuned=lib.num_tuned,
               implementations=impls)
    print(f"built in {out['build_s']:.0f} s: {lib.num_tuned} of {len(lib.groups)} groups from "
          f"records; {impls}")
    dev = templtune.cuda(0)
    module = graph.GraphModule(lib["default"](dev))
    x = np.random.default_rng(0).uniform(size=ishape).astype("float32")
    module.set_input("data", x)
    module.run()
    ref = graph.evaluate(net, params, data=x)
    np.testing.assert_allclose(module.get_output(0).numpy(), ref, rtol=1e-3, atol=1e-5)
    print("check: templtune matches numpy")
    if a.dry_run:
        out["timing"] = "dry run (not timed)"
        return out

    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    fwd = _torch_forward()(net, params, device="cuda")
    xt = torch.from_numpy(x).cuda()
    with torch.no_grad():
        np.testing.assert_allclose(fwd(xt).cpu().numpy(), ref, rtol=1e-3, atol=1e-5)
        print("check: PyTorch matches numpy")
        for _ in range(10):  # warm-up: cuDNN's algorithm search, templtune's first launches
            fwd(xt)
        module.run()
        ftimer = module.module.time_evaluator("run", dev, number=a.number, repeat=1)
        ours, theirs = [], []
        for _ in range(a.rounds):  # interleaved: both see the same GPU clocks
            ours.append(ftimer().results[0] * 1e3)
            theirs.append(_torch_round(fwd, xt, a.number) * 1e3)
    mo, mt = statistics.median(ours), statistics.median(theirs)
    out.update(templtune_ms=mo, torch_ms=mt, ratio_torch_over_templtune=mt / mo,
               torch_version=torch.__version__, tf32=False, timing=module.module.timing)
    print(f"templtune {mo:8.3f} ms ({gflop / mo * 1e3:7.1f} GFLOPS)   PyTorch/cuDNN fp32 "
          f"{mt:8.3f} ms ({gflop / mt * 1e3:7.1f} GFLOPS)   ratio {mt / mo:.2f}x")
    if a.profile:
        rows = module.profile(number=a.number)
        total = sum(r[2] for r in rows)
        for gname, impl, sec in sorted(rows, key=lambda r: -r[2])[:15]:
            print(f"  {gname[:44]:44s} {impl[:28]:28s} {sec * 1e3:8.3f} ms {sec / total:6.1%}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="resnet-18,resnet-50", help="comma-separated zoo names")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--log", default=None, help="auto-scheduler records (one network only; "
                    "default logs/NETWORK-NCHW-B1-IMAGE-cuda.json)")
    ap.add_argument("--autotvm-log", default=None, help="AutoTVM records of the CUDA templates")
    ap.add_argument("--tune-trials", type=int, default=0,
                    help="auto-scheduler trials per network before timing (0: none)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=20, help="runs per round")
    ap.add_argument("--profile", action="store_true", help="print the slowest groups")
    ap.add_argument("--dry-run", action="store_true",
                    help="build, run once and check only (works on the CPU emulator)")
    ap.add_argument("--json", default=None, help="write the summaries to this file")
    a = ap.parse_args()
    names = [n for n in a.network.split(",") if n]
    if a.log and len(names) > 1:
        ap.error("--log names the records of one network; pass one --network with it")
    if not a.dry_run and not device_exists():
        print("network_gpu: no CUDA GPU runtime or device here (pycuda / cuda-python with a "
              "driver); CPU emulator timings say nothing about a GPU. Use --dry-run (with a "
              "small --image) to build and check only.", file=sys.stderr)
        return 2
    summaries = []
    for n in names:
        summaries.append(bench_network(n, a))
        if a.json:  # NOTE: after each network, so a run cut off by a time budget keeps results
            with open(a.json, "w") as fh:
                json.dump(summaries, fh, indent=2)
    print(json.dumps(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
