"""Re-measure the best configs of a sample-efficiency run and re-score the runs with them.

``sample_efficiency.py`` measures each config once (one timed run) on a shared machine, so a
config measured in a quiet moment can look much faster than its peers, and "trials to reach
90% of the best any run found" then means "trials until that one config was drawn". This
script re-measures the ``--top`` best configs of each workload ``--repeat`` times (middle runs
averaged, as the runner does) and recomputes, with the re-measured values substituted:
best GFLOPS per checkpoint (mean over seeds) and trials to 90% of the (new) best.

Trials are matched to configs through their measured throughput (each run's curve holds the
GFLOPS of every trial, computed exactly as the config's entry in ``measured_gflops``).

Usage::

    python benchmarks/remeasure_best.py --json benchmarks/results/sample_efficiency_x.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def rescore(summary: dict[str, Any], new: dict[int, float], checkpoints: list[int]
            ) -> dict[str, Any]:
    """Best-after-checkpoint means and trials to 90% of the best, with configs' GFLOPS
    replaced by ``new`` (config index -> GFLOPS)."""
    by_value = {v: int(i) for i, v in summary["measured_gflops"].items() if v > 0}
    fixed: dict[str, list[list[float]]] = {}
    for tname, per in summary["curves"].items():
        fixed[tname] = [[new.get(by_value.get(g, -1), g) for g in curve]
                        for curve in per.values()]
    best = max(max(c, default=0.0) for cs in fixed.values() for c in cs)
    res: dict[str, Any] = {"best_any_gflops": best, "tuners": {}}
    for tname, curves in fixed.items():
        rows, to90 = [], []
        for c in curves:
            mx = np.maximum.accumulate(np.asarray(c or [0.0]))
            rows.append([float(mx[min(k, len(mx)) - 1]) for k in checkpoints])
            hit = np.flatnonzero(mx >= 0.9 * best)
            to90.append(int(hit[0]) + 1 if len(hit) else None)
        res["tuners"][tname] = {"best_gflops_mean": np.mean(rows, axis=0).tolist(),
                                "best_gflops_per_seed": rows, "trials_to_90pct": to90}
    return res


def remeasure(summary: dict[str, Any], top: int, repeat: int, timeout: float,
              rounds: int = 1) -> dict[int, float]:
    """Re-measure the ``top`` configs with the highest recorded GFLOPS; index -> GFLOPS.

    With ``rounds > 1`` every round times each config once (``repeat`` runs) in turn, and a
    config's value is the median over rounds: the configs are interleaved in time, so a slow
    or quiet moment of the machine does not favour one of them."""
    import wide_templates  # noqa: F401 - registers the wide templates
    from sample_efficiency import WORKLOADS, register_x86_templates

    from templtune import autotvm
    from templtune.autotvm.measure import MeasureInput
    from templtune.measure.local_builder import LocalBuilder
    from templtune.measure.local_runner import LocalRunner

    register_x86_templates()
    wl = summary["workload"].split("/")[0]
    task = autotvm.task.create(summary["template"], args=WORKLOADS[wl][2], target="llvm")
    meas = sorted(((float(v), int(i)) for i, v in summary["measured_gflops"].items()),
                  reverse=True)[:top]
    inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for _, i in meas]
    builder = LocalBuilder(n_parallel=2)
    runner = LocalRunner(number=1, repeat=repeat, min_repeat_ms=0, timeout=timeout)
    builder.set_task(task, runner.get_build_kwargs())
    runner.set_task(task)
    per_round: list[list[float]] = []
    try:
        built = builder.build(inputs)
        for _ in range(max(1, rounds)):
            results = runner.run(inputs, built)
            per_round.append([task.flop / r.mean_cost / 1e9 if r.ok else 0.0 for r in results])
    finally:
        builder.close()
        runner.close()
    vals = np.median(np.asarray(per_round), axis=0)
    out = {}
    for k, (old, i) in enumerate(meas):
        out[i] = float(vals[k])
        spread = (f" (rounds {min(r[k] for r in per_round):.2f}-"
                  f"{max(r[k] for r in per_round):.2f})" if len(per_round) > 1 else "")
        print(f"  config {i}: {old:7.2f} -> {out[i]:7.2f} GFLOPS{spread}", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="summary written by sample_efficiency.py")
    p.add_argument("--out", help="write the re-scored summaries here (JSON)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=1,
                   help="interleaved rounds (median per config); 1 = one pass")
    a = p.parse_args(argv)
    os.environ["TEMPLTUNE_NUM_THREADS"] = str(a.threads)
    summaries = json.loads(Path(a.json).read_text())
    out = []
    for s in summaries:
        if "(seeds so far)" in s["workload"]:
            s["workload"] = s["workload"].replace(" (seeds so far)", "")
        print(f"== {s['workload']} ({s['template']}): re-measuring the top {a.top}")
        new = remeasure(s, a.top, a.repeat, a.timeout, a.rounds)
        if "curves" not in s:
            print("  (no per-trial curves stored: runs not re-scored)")
            out.append({"workload": s["workload"],
                        "remeasured": {str(k): v for k, v in new.items()}})
            continue
        cps = s["checkpoints"]
        res = rescore(s, new, cps)
        res["workload"], res["remeasured"] = s["workload"], {str(k): v for k, v in new.items()}
        print(f"best found by any run, re-measured: {res['best_any_gflops']:.2f} GFLOPS")
        print("tuner   " + "".join(f"{c:>10d}" for c in cps) + "   trials to 90% (per seed)")
        for tname, e in res["tuners"].items():
            print(f"{tname:8s}" + "".join(f"{v:10.2f}" for v in e["best_gflops_mean"])
                  + f"   {e['trials_to_90pct']}")
        out.append(res)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
