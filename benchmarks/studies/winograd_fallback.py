"""The untuned choice for 3x3 stride-1 layers: ``conv2d_NCHWc_winograd``'s fallback config
(F(2x2) and F(4x4)) against ``conv2d_NCHWc``'s, each kernel alone, warm, at equal channel
blocks (``TEMPLTUNE_NUM_THREADS`` threads, min of 5 x 10 calls). Layers are ``HxCIxCO``
(output H x H, padding 1). Run::

    python3 benchmarks/studies/winograd_fallback.py 56x64x192,14x128x256,7x512x512 [--blocks 32,16]
    PYTHONPATH=benchmarks/studies/avx2_proxy python3 benchmarks/studies/winograd_fallback.py ...
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.autotvm.strategy import load_templates  # noqa: E402
from templtune.target import Target  # noqa: E402


def _time(name: str, args: tuple[int, ...], tgt: Target) -> float:
    task = autotvm.task.create(name, args, tgt)
    with tgt:
        s, ts = task.func(*args)  # no record: the fallback config
    f = templtune.build(s, ts, tgt)
    rng = np.random.default_rng(0)
    nd = [templtune.nd.array(rng.standard_normal([int(d) for d in t.shape]).astype("float32"))
          for t in ts]
    return min(f.time_evaluator(f.entry_name, templtune.cpu(0), number=10, repeat=5)(*nd)
               .results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("layers", help="comma-separated HxCIxCO")
    ap.add_argument("--blocks", default="32,16", help="channel blocks tried, first dividing")
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    load_templates()
    threads = int(os.environ.get("TEMPLTUNE_NUM_THREADS", "1"))
    tgt = Target(f"llvm -num-cores={threads}")
    blocks = [int(b) for b in a.blocks.split(",")]
    for layer in a.layers.split(","):
        h, ci, co = (int(v) for v in layer.split("x"))
        base = (1, h, h, co, ci, 3, 3, 1, 1)
        b = next((b for b in blocks if not (ci % b or co % b)), None)
        if b is None:
            print(f"{layer}: no block of {blocks} divides the channels")
            continue
        direct = _time("conv2d_NCHWc", base, tgt)
        gflop = 2.0 * h * h * ci * co * 9 / 1e9
        row = f"{h:3d} {ci:4d}->{co:4d} direct {direct * 1e3:7.3f} ms ({gflop / direct:4.0f} GFLOPS)"
        for m in (2, 4):
            t = _time("conv2d_NCHWc_winograd", (*base, b, b, m), tgt)
            row += f" | {b}c F({m}) {t * 1e3:7.3f} ms ({direct / t:4.2f}x)"
        print(row, flush=True)


if __name__ == "__main__":
    main()
