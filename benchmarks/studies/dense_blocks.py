"""The ``dense`` template's register blocks on one shape: its fallback config and chosen points
of its space, each with its hottest loop's accumulators and stack accesses (spills) and its
speed on one thread (min of ``--repeat`` x ``--number`` calls). A block is ``ROWS:MB:KU``:
``ROWS``-row blocks, ``MB`` of them per row tile (``tile_y = [-1, MB, ROWS]``), ``KU`` reduction
steps unrolled (``tile_k``), the columns as the fallback has them. Run as an AVX2 host with
``PYTHONPATH=benchmarks/studies/avx2_proxy``::

    python3 benchmarks/studies/dense_blocks.py 64,1000,512 8:1:4 12:6:4
    PYTHONPATH=benchmarks/studies/avx2_proxy python3 benchmarks/studies/dense_blocks.py \\
        1024,1024,1024,32 2:1:4 3:11:4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.autotvm.strategy import load_templates  # noqa: E402
from templtune.autotvm.task.space import FallbackConfigEntity  # noqa: E402
from templtune.codegen.llvm.asm_loops import hottest_loop  # noqa: E402
from templtune.target import Target  # noqa: E402

TARGET = "llvm -num-cores=1"


def _point(space: Any, rows: int, mb: int, ku: int, cols: list[int]) -> Any:
    """The config of ``space`` with these row and reduction blocks and the columns ``cols``."""
    for i in range(space.range_length):
        if not space.is_index_valid(i):
            continue
        c = space.get(i)
        if (list(c["tile_y"].size[1:]) == [mb, rows] and c["tile_k"].size[-1] == ku
                and list(c["tile_x"].size[1:]) == cols[1:]):
            return c
    raise SystemExit(f"{rows}:{mb}:{ku} with tile_x {cols} is not in the space")


def _measure(task: Any, cfg: Any, number: int, repeat: int) -> tuple[Any, float]:
    with Target(TARGET), autotvm.ApplyConfig(cfg):
        s, bufs = task.func(*task.args)
    f = templtune.build(s, bufs, target=TARGET)
    rng = np.random.default_rng(0)
    nd = [templtune.nd.array(rng.standard_normal([int(d) for d in b.shape]).astype("float32"))
          for b in bufs]
    res = f.time_evaluator(f.entry_name, templtune.cpu(0), number=number, repeat=repeat)(*nd)
    return hottest_loop(f.get_source("asm")), min(res.results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("args", help="the dense task's arguments: M,N,K[,prepacked block]")
    ap.add_argument("blocks", nargs="*", help="ROWS:MB:KU points of the space")
    ap.add_argument("--number", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    load_templates()
    args = tuple(int(x) for x in a.args.split(","))
    m, n, k = args[:3]
    task = autotvm.task.create("dense", args, TARGET)
    fallback = FallbackConfigEntity()
    cases: list[tuple[str, Any]] = [("fallback", fallback)]
    results = [_measure(task, fallback, a.number, a.repeat)]  # fills the fallback's knobs
    cols = list(fallback["tile_x"].size)
    for b in a.blocks:
        r, mb, ku = (int(x) for x in b.split(":"))
        cases.append((b, _point(task.config_space, r, mb, ku, cols)))
        results.append(_measure(task, cases[-1][1], a.number, a.repeat))
    print(f"dense{args} on {Target(TARGET).capabilities.cpu or 'this host'}, 1 thread")
    for (label, cfg), (lp, sec) in zip(cases, results):
        print(f"  {label:>10}  tile_y {list(cfg['tile_y'].size)} tile_x {list(cfg['tile_x'].size)}"
              f" tile_k {list(cfg['tile_k'].size)}: {lp.accumulators} accumulators, "
              f"{lp.stack_accesses} stack accesses, {2 * m * n * k / sec / 1e9:.1f} GFLOPS")

if __name__ == "__main__":
    main()
