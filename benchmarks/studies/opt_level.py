"""resnet-18 built at opt_level 2 (NCHW) and 3 (NCHW[x]c, fused epilogues) under the packaged
logs: outputs compared, then timed interleaved (7 rounds of 5 runs, medians).

Run: ``TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/opt_level.py`` (and 2)."""

from __future__ import annotations

import time

import numpy as np

import templtune
import templtune.relay.testing as zoo
from templtune import graph
from templtune.contrib import graph_executor
from templtune.graph.transform import PassContext


def main() -> None:
    mod, params = zoo.resnet.get_workload(num_layers=18)
    x = np.random.default_rng(0).uniform(size=(1, 3, 224, 224)).astype("float32")
    mods, groups = {}, {}
    for lvl in (2, 3):
        with PassContext(opt_level=lvl):
            lib = graph.build(mod, "llvm", params)
        m = graph_executor.GraphModule(lib["default"](templtune.cpu()))
        m.set_input("data", x)
        m.run()
        mods[lvl], groups[lvl] = m, len(lib.groups)
    diff = np.abs(mods[3].get_output(0).numpy() - mods[2].get_output(0).numpy()).max()
    print(f"max |opt3 - opt2| {float(diff):.2e}; groups {groups[2]} vs {groups[3]}")
    ts: dict[int, list[float]] = {2: [], 3: []}
    for _ in range(7):
        for lvl in (2, 3):
            t0 = time.perf_counter()
            for _ in range(5):
                mods[lvl].run()
            ts[lvl].append((time.perf_counter() - t0) / 5 * 1e3)
    for lvl in (2, 3):
        print(f"opt_level {lvl}: median {np.median(ts[lvl]):.2f} ms")
    print(f"speed opt3 / opt2: {np.median(ts[2]) / np.median(ts[3]):.2f}x")


if __name__ == "__main__":
    main()
