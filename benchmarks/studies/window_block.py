"""A/B of the default CPU schedule's output block in short reduction windows (depthwise convs,
pools): the same network built with the block off (``_ROW_BLOCK_MAX = 1``) and on (8), run
alternately in one process, thread CPU time, medians.

Usage: ``TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/window_block.py mobilenet
[--rounds 21]`` (or ``resnet-18``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import templtune as tvm  # noqa: E402
import templtune.graph.default_schedules as D  # noqa: E402
from templtune import relay  # noqa: E402
from templtune.contrib import graph_executor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("network", choices=["mobilenet", "resnet-18"])
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args()
    shape = (3, 224, 224)
    if a.network == "mobilenet":
        mod, params = relay.testing.mobilenet.get_workload(batch_size=1, image_shape=shape)
    else:
        mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=1,
                                                        image_shape=shape)
    data = np.random.default_rng(0).uniform(size=(1, *shape)).astype("float32")
    mods = {}
    for tag, block in (("off", 1), ("on", D._ROW_BLOCK_MAX)):
        saved, D._ROW_BLOCK_MAX = D._ROW_BLOCK_MAX, block
        try:
            with tvm.transform.PassContext(opt_level=3):
                lib = relay.build(mod, target="llvm", params=params)
        finally:
            D._ROW_BLOCK_MAX = saved
        m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
        m.set_input("data", data)
        m.run()
        mods[tag] = m
    times: dict[str, list[float]] = {k: [] for k in mods}
    for _ in range(a.rounds):
        for k, m in mods.items():
            t0 = time.thread_time()
            m.run()
            m.run()
            times[k].append((time.thread_time() - t0) / 2)
    off, on = (float(np.median(times[k])) for k in ("off", "on"))
    print(f"{a.network}: block off {off * 1e3:.2f} ms, on {on * 1e3:.2f} ms, speedup "
          f"{off / on:.3f}")


if __name__ == "__main__":
    main()
