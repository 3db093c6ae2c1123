"""Where a network's time goes, group by group, in one process: an ONNX file or a zoo model
built at opt_level 3 (the packaged logs) for ``--threads`` (default 1), its whole run timed, then
``GraphModule.profile`` summed by implementation with the slowest groups listed; with
``--ort``, ONNX Runtime on the same input beside it (min of runs, alternating).

``--modules K`` builds K runtimes of the same build (fresh intermediate storage each): a group
whose time depends on where its buffers lie shows up as different totals. Run::

    python3 benchmarks/studies/group_profile.py /tmp/zoo/squeezenet1_1.onnx [--ort] [--top 15]
        [--modules 3]
    PYTHONPATH=benchmarks/studies/avx2_proxy python3 benchmarks/studies/group_profile.py ...
    python3 benchmarks/studies/group_profile.py resnet-50 --threads 2
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from models import load_model  # noqa: E402
from peers import ort_engine  # noqa: E402

from templtune import graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402


def _best(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def build(model: str, threads: int) -> tuple[Any, str, np.ndarray]:
    """``(lib, input name, seeded normal input)`` of ``model`` (an ONNX file or a zoo name)
    built at opt_level 3 with the packaged logs for ``threads`` threads."""
    logging.disable(logging.WARNING)
    net, params = load_model(model)
    data = next(v for v in net.params if v.name not in params)
    with PassContext(opt_level=3):
        lib = graph.build(net, f"llvm -num-cores={threads}", params)
    x = np.random.default_rng(0).standard_normal(data.shape).astype("float32")
    return lib, data.name, x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file or a zoo name (resnet-18, ...)")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--modules", type=int, default=1)
    ap.add_argument("--ort", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="threads of the build and its run")
    args = ap.parse_args()
    # NOTE: read when the runtime modules are made (below), not at import
    os.environ["TEMPLTUNE_NUM_THREADS"] = str(args.threads)
    path = Path(args.model)
    lib, name, x = build(args.model, args.threads)
    for k in range(args.modules):
        gm = graph.GraphModule(lib)
        gm.set_input(name, x)
        run = _best(gm.run, args.runs)
        rows = gm.profile(number=10)
        print(f"runtime {k}: run {run * 1e3:.2f} ms, profile sum "
              f"{sum(t for _, _, t in rows) * 1e3:.2f} ms over {len(rows)} groups")
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for _, impl, t in rows:
        by[impl][0] += t
        by[impl][1] += 1
    for impl, (t, n) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        print(f"  {impl:40s} {t * 1e3:8.2f} ms  x{n}")
    keys = [cg.workload_key for cg in lib.groups]
    for (group, impl, t), key in sorted(zip(rows, keys), key=lambda r: -r[0][2])[:args.top]:
        print(f"  {t * 1e3:7.3f} ms  {impl:30s} {group[:55]:55s} {str(key)[:90]}")
    if args.ort and path.suffix == ".onnx":
        ort_run = ort_engine(path, x, name).prepare(args.threads)
        t_ort = min(_best(ort_run, args.runs) for _ in range(2))
        t_tt = min(_best(gm.run, args.runs) for _ in range(2))
        print(f"ORT {t_ort * 1e3:.2f} ms, templtune {t_tt * 1e3:.2f} ms: "
              f"templtune / ORT speed {t_ort / t_tt:.2f}")


if __name__ == "__main__":
    main()
