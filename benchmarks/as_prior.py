"""Quality of the auto-scheduler's CPU initial population, with and without the register-tile
prior (``cpu_register_tile_prior``), on the benchmark workloads of ``auto_scheduler.py``.

Samples ``N`` initial states per prior setting (seeded, random model), measures each once at
1 thread through the standard builder/runner, alternating between the settings, and prints the
median / p75 / p90 / max GFLOPS per setting.

Run: ``python benchmarks/as_prior.py {dense|conv|conv_nhwc} [N] [priors, e.g. 0,1,1/flat]``;
a prior's suffix sets the share of its samples whose middle spatial level of ``SSRSRS`` is 1
(``cpu_middle_level_one``): ``/flat`` none, ``/one`` all, ``/0.25`` a quarter; without one,
the policy's default.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from auto_scheduler import CONV, CONV_WORKLOADS, DENSE  # noqa: E402  (registers the workloads)

from templtune import auto_scheduler  # noqa: E402
from templtune.auto_scheduler.cost_model import RandomModel  # noqa: E402
from templtune.auto_scheduler.measure import ProgramMeasurer  # noqa: E402
from templtune.auto_scheduler.search_policy import SketchPolicy  # noqa: E402

WORKLOADS = {"dense": ("bench_dense", DENSE), "conv": (CONV_WORKLOADS["nchw"], CONV),
             "conv_nhwc": (CONV_WORKLOADS["nhwc"], CONV)}
#: named shares of samples whose SSRSRS middle level is 1
MIDDLE = {"flat": 0.0, "one": 1.0}


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", nargs="?", default="dense", choices=sorted(WORKLOADS))
    ap.add_argument("n", nargs="?", type=int, default=24, help="samples per prior setting")
    ap.add_argument("priors", nargs="?", default="0,1",
                    help="comma-separated prior shares, each with an optional /flat, /one "
                         "or /<share> suffix for the middle level")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    kind, n, priors = args.kind, args.n, args.priors.split(",")
    name, wargs = WORKLOADS[kind]
    task = auto_scheduler.SearchTask(func=name, args=wargs, target="llvm")
    groups = {}
    for p in priors:
        share, _, mid = p.partition("/")
        params = {"cpu_register_tile_prior": float(share)}
        if mid:
            params["cpu_middle_level_one"] = MIDDLE[mid] if mid in MIDDLE else float(mid)
        pol = SketchPolicy(task, RandomModel(1), params=params, seed=7, verbose=0)
        t0 = time.perf_counter()
        groups[p] = pol.sample_initial_population(n)[:n]
        print(f"prior {p}: {len(groups[p])} samples in {time.perf_counter() - t0:.2f} s")
    m = ProgramMeasurer(auto_scheduler.LocalBuilder(n_parallel=2),
                        auto_scheduler.LocalRunner(timeout=15), [], 0)
    gflops: dict[str, list[float]] = {p: [] for p in priors}
    try:
        for i in range(n):
            for p in priors:
                if i < len(groups[p]):
                    _, (r,) = m.measure(task, pol, [groups[p][i]])
                    gflops[p].append(task.compute_dag.flop_ct / r.mean_cost / 1e9
                                     if r.error_no == 0 else 0.0)
    finally:
        m.close()
    for p in priors:
        g = np.array(gflops[p])
        print(f"{kind} prior {p}: n {len(g)} median {np.median(g):.1f} "
              f"p75 {np.percentile(g, 75):.1f} p90 {np.percentile(g, 90):.1f} max {g.max():.1f} "
              f"failed {(g == 0).sum()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
