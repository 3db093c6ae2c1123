"""A zoo network (``--model``, default resnet-18; NCHW, batch 1) built under two or more AutoTVM logs, against ONNX Runtime on the
same weights, one thread, in one process.

Each build is ``relay.build`` at opt_level 3 under ``apply_history_best(log)`` (the packaged
reference log underneath). The engines run interleaved in ``--rounds`` rounds of ``--number``
runs, timed in thread CPU time; min, 25th percentile and median per run are reported and the
ratios ORT time / templtune time (> 1: templtune faster). The group and layout-transform counts
say whether the convolutions keep one blocking. Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/network_logs.py LOG [LOG ...]
        [--model resnet-18] [--rounds 15] [--number 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "1")

from inference import load_model  # noqa: E402
from peers import ort_engine, templtune_engine, to_onnx  # noqa: E402

import templtune  # noqa: E402
from templtune import autotvm, graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402


def transforms(net: graph.Function, params: dict, log: str) -> tuple[int, int]:
    """``(groups, layout_transform groups or epilogues)`` of the build under ``log``."""
    with autotvm.apply_history_best(log), PassContext(opt_level=3):
        lib = graph.build(net, "llvm", params)
    return len(lib.groups), sum("layout_transform" in g.group.name for g in lib.groups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--model", default="resnet-18")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per engine (above 1 the rounds are timed in wall clock)")
    a = ap.parse_args()
    net, params = load_model(a.model)
    x = np.random.default_rng(0).uniform(size=net.params[0].shape).astype("float32")
    runs = {}
    for log in a.logs:
        g, t = transforms(net, params, log)
        name = f"templtune {Path(log).name}"
        runs[name] = templtune_engine(name, net, params, x, log).prepare(a.threads)
        print(f"{name}: {g} groups, {t} with a layout_transform")
    inp = next(v.name for v in net.params if v.name not in params)
    runs["ORT"] = ort_engine(to_onnx(net, params).SerializeToString(), x,
                             inp).prepare(a.threads)
    clock = time.thread_time if a.threads == 1 else time.perf_counter
    ref = runs["ORT"]()
    for name, f in runs.items():
        diff = float(np.abs(f() - ref).max())
        assert diff < 1e-3 * float(np.abs(ref).max()), (name, diff)
    print(f"load average {os.getloadavg()}; {a.threads} thread(s); {a.rounds} rounds of "
          f"{a.number} runs, {clock.__name__}")
    ts: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.rounds):
        for name, f in runs.items():
            t0 = clock()
            for _ in range(a.number):
                f()
            ts[name].append((clock() - t0) / a.number)
    o = {q: float(np.quantile(ts["ORT"], q)) for q in (0.0, 0.25, 0.5)}
    for name, v in ts.items():
        s = {q: float(np.quantile(v, q)) for q in (0.0, 0.25, 0.5)}
        print(f"{name:40s} min {s[0.0] * 1e3:6.2f} ms  p25 {s[0.25] * 1e3:6.2f}  median "
              f"{s[0.5] * 1e3:6.2f}   ORT/this: min {o[0.0] / s[0.0]:.2f} p25 "
              f"{o[0.25] / s[0.25]:.2f} median {o[0.5] / s[0.5]:.2f}")
    print(f"load average {os.getloadavg()}; templtune {templtune.__file__}")


if __name__ == "__main__":
    main()
