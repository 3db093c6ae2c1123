"""What each conv group of a zoo network loses to the caches it meets inside the network.

The network runs as built (opt_level 3, the packaged log), each fused group timed in place
(thread CPU time; run with ``TEMPLTUNE_NUM_THREADS=1``). Runs alternate between four variants
and each group's minimum per variant is printed:

* ``network``: as the network runs it;
* ``weights read``: each group's 6-d weight arrays summed by numpy just before it (in cache);
* ``data read``: its other inputs read just before it instead;
* ``again``: the group run twice in a row, the second call timed (everything it touches warm).

Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/cold_weights.py [--model resnet-50]
        [--runs 40]
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

from templtune import graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402

VARIANTS = ("network", "weights read", "data read", "again")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet-50")
    ap.add_argument("--runs", type=int, default=40)
    a = ap.parse_args()
    net, params = load_model(a.model)
    with PassContext(opt_level=3):
        lib = graph.build(net, "llvm", params)
    gm = graph.GraphModule(lib)
    x = np.random.default_rng(0).uniform(size=net.params[0].shape).astype("float32")
    gm.set_input(next(v.name for v in net.params if v.name not in params), x)
    gm.run()
    plan, calls = gm.module.plan, gm.module.calls
    spans, j = [], 0
    for cg in lib.groups:
        spans.append((j, j + len(cg.steps)))
        j += len(cg.steps)
    best = {v: [float("inf")] * len(spans) for v in VARIANTS}
    sink = 0.0
    for r in range(a.runs):
        v = VARIANTS[r % len(VARIANTS)]
        for g, (lo, hi) in enumerate(spans):
            if v in ("weights read", "data read"):
                for _, args in plan[lo:hi]:
                    for arr in args[:-1]:
                        if (arr.ndim == 6) == (v == "weights read"):
                            sink += float(arr.sum(dtype=np.float64))
            t0 = time.thread_time()
            for call in calls[lo:hi]:
                call()
            if v == "again":
                t0 = time.thread_time()
                for call in calls[lo:hi]:
                    call()
            best[v][g] = min(best[v][g], time.thread_time() - t0)
    print(f"{a.model}, min of {a.runs // len(VARIANTS)} runs per variant, thread CPU time "
          f"(checksum {sink:.3g})")
    print(f"{'conv group':34s} {'kernel':>6s} {'output':>16s} " +
          " ".join(f"{v:>12s}" for v in VARIANTS))
    total = dict.fromkeys(VARIANTS, 0.0)
    for g, cg in enumerate(lib.groups):
        if "conv2d" not in cg.group.name:
            continue
        out = plan[spans[g][1] - 1][1][-1].shape
        w = [arr.shape for arr in plan[spans[g][0]][1] if arr.ndim == 6]
        k = f"{w[0][2]}x{w[0][3]}" if w else "-"
        print(f"{cg.group.name[:34]:34s} {k:>6s} {str(tuple(out[1:4])):>16s} " +
              " ".join(f"{best[v][g] * 1e3:12.3f}" for v in VARIANTS))
        for v in VARIANTS:
            total[v] += best[v][g]
    print(f"{'all conv groups (ms)':58s} " + " ".join(f"{total[v] * 1e3:12.2f}" for v in VARIANTS))


if __name__ == "__main__":
    main()
