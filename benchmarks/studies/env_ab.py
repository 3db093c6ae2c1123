"""A zoo network under two (or more) environment settings: each setting builds and runs the
network in a process of its own, the settings alternating over ``--rounds`` rounds; per
process the median of ``--runs`` timed runs (after 5 warm-up runs), then the minimum over the
rounds per setting and its ratio to the first setting's. Run::

    python3 benchmarks/studies/env_ab.py resnet-50 TEMPLTUNE_THREAD_POOL=gomp \\
        TEMPLTUNE_THREAD_POOL=templtune [--threads 1,2] [--rounds 4] [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_WORKER = """
import json, logging, sys, time
import numpy as np
sys.path.insert(0, {bench!r})
from inference import load_model
from templtune import graph
from templtune.graph.transform import PassContext
logging.disable(logging.WARNING)
net, params = load_model(sys.argv[1])
with PassContext(opt_level=3):
    lib = graph.build(net, "llvm", params)
gm = graph.GraphModule(lib)
data = next(v for v in net.params if v.name not in params)
gm.set_input(data.name, np.random.default_rng(0).standard_normal(data.shape).astype(np.float32))
for _ in range(5):
    gm.run()
ts = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    gm.run()
    ts.append(time.perf_counter() - t)
print(json.dumps(ts))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo name (resnet-50, ...) or an ONNX file")
    ap.add_argument("settings", nargs="+", help="NAME=VALUE[,NAME=VALUE...] per setting")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    worker = _WORKER.format(bench=str(Path(__file__).resolve().parents[1]))
    envs = [dict(kv.split("=", 1) for kv in s.split(",")) for s in a.settings]
    for threads in a.threads.split(","):
        ms: list[list[float]] = [[] for _ in envs]
        for r in range(a.rounds):
            order = list(range(len(envs)))
            if r % 2:
                order.reverse()
            for k in order:
                env = {**os.environ, **envs[k], "TEMPLTUNE_NUM_THREADS": threads}
                out = subprocess.run([sys.executable, "-c", worker, a.model, str(a.runs)],
                                     env=env, capture_output=True, text=True, check=True).stdout
                ms[k].append(statistics.median(json.loads(out.strip().splitlines()[-1])) * 1e3)
        base = min(ms[0])
        for s, m in zip(a.settings, ms):
            print(f"{a.model} {threads} thread(s) {s}: min {min(m):.2f} ms (rounds "
                  f"{' '.join(f'{x:.2f}' for x in m)}), first / this {base / min(m):.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
