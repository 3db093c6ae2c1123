"""A noisy neighbour on demand: templtune and ONNX Runtime on one core (1 thread each) while a
second process copies arrays back and forth on the other core, so the two engines' sensitivity
to a shared last-level cache (or to memory bandwidth) can be compared in one run.

``--hog-mb`` lists the sizes of the neighbour's arrays (0: no neighbour): a few MB stay in
the L3 and share it, ~24 MB (two arrays) sweep it, hundreds of MB stream from memory. For
each size both engines are timed, alternating, and medians printed with templtune's speed
over ORT's; ``--profile`` adds the fused groups that lost the most time under the largest
neighbour (``GraphModule.profile``: each group repeated, so this undercounts what a group's
cold inputs cost inside the whole run). Linux only (``os.sched_setaffinity``). Run::

    python3 benchmarks/studies/l3_contention.py /tmp/zoo/squeezenet1_1.onnx \\
        [--hog-mb 0,4,24,256] [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from models import load_model  # noqa: E402
from peers import ort_engine  # noqa: E402

from templtune import graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402

_HOG = """import numpy as np, os, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
a = np.ones(int(sys.argv[1]) // 4, np.float32); b = np.empty_like(a)
while True:
    np.copyto(b, a); np.copyto(a, b)
"""


def _median_ms(fn: object, runs: int = 30) -> float:
    fn()  # type: ignore[operator]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file")
    ap.add_argument("--hog-mb", default="0,4,24,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("needs two cores: one for the engines, one for the neighbour")
    os.sched_setaffinity(0, {cores[0]})
    net, params = load_model(args.model)
    data = next(v for v in net.params if v.name not in params)
    name, shape = data.name, data.shape
    with PassContext(opt_level=3):
        lib = graph.build(net, "llvm -num-cores=1", params)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    gm = graph.GraphModule(lib)
    gm.set_input(name, x)
    ort_run = ort_engine(Path(args.model), x, name).prepare(1)
    sizes = [float(s) for s in args.hog_mb.split(",")]
    profiles = {}
    for mb in sizes:
        hog = None
        if mb > 0:
            hog = subprocess.Popen([sys.executable, "-c", _HOG, str(int(mb * 2**20)),
                                    str(cores[1])])
            time.sleep(1.0)
        try:
            pairs = [(_median_ms(gm.run), _median_ms(ort_run))
                     for _ in range(args.rounds)]
            tt = float(np.median([a for a, _ in pairs]))
            on = float(np.median([b for _, b in pairs]))
            print(f"neighbour {mb:6.0f} MB: templtune {tt:6.2f} ms, ORT {on:6.2f} ms, "
                  f"templtune / ORT speed {on / tt:.2f}", flush=True)
            if args.profile and mb in (0, max(sizes)):
                profiles[mb] = gm.profile(number=10)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    if args.profile and len(profiles) == 2:
        quiet, busy = profiles[0], profiles[max(sizes)]
        keys = [cg.workload_key for cg in lib.groups]
        rows = sorted(zip(quiet, busy, keys), key=lambda r: r[0][2] - r[1][2])
        for (_, impl, t0), (_, _, t1), key in rows[:10]:
            print(f"  {(t1 - t0) * 1e3:+.3f} ms  {t0 * 1e3:.3f} -> {t1 * 1e3:.3f}  {impl:30s} "
                  f"{str(key)[:80]}")


if __name__ == "__main__":
    main()
