"""Which groups of a network lose time on 2 threads: each group's time on 1 thread and on
``--threads`` (each in its own process, the thread count read when the runtime is made), the
groups listed by the time lost against perfect scaling (``t1 / N``), with their scaling.

Group times are the minimum of ``--profiles`` ``GraphModule.profile`` runs (a busy host
inflates single runs; the minimum is each group's undisturbed time), and of ``--rounds``
pairs of processes, the two thread counts alternating: on a shared VM a noisy minute can
slow every 2-thread group several-fold (small kernels most), and a single pair of processes
then reads it as the kernels' own scaling.

A group's 1-thread time is not what it would take on one thread *inside* the N-thread run,
where its inputs were written by N cores: ``--serial IMPL`` adds a third column, the groups
whose implementation contains ``IMPL`` (``depthwise``) run on one thread in the N-thread
build. Run::

    python3 benchmarks/studies/thread_scaling.py /tmp/zoo/mobilenet_v2.onnx [--threads 2]
        [--top 15] [--rounds 3] [--serial depthwise]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def _profile(model: str, threads: int, profiles: int, serial: str = "") -> list[dict]:
    """``[{group, impl, t, key}]`` of ``model`` built and run on ``threads`` threads (those
    groups whose implementation contains ``serial``, where given, on one)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from group_profile import build

    from templtune import graph

    lib, name, x = build(model, threads)
    for cg in lib.groups:
        if serial and serial in cg.impl:
            for k in cg.kernels:
                k.set_num_threads(1)
    gm = graph.GraphModule(lib)
    gm.set_input(name, x)
    best: list[float] | None = None
    for _ in range(profiles):
        rows = gm.profile(number=20)
        ts = [t for _, _, t in rows]
        best = ts if best is None else [min(a, b) for a, b in zip(best, ts)]
    assert best is not None
    return [dict(group=g, impl=i, t=t, key=str(cg.workload_key))
            for (g, i, _), t, cg in zip(rows, best, lib.groups)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file or a zoo name (resnet-18, ...)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--profiles", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="process pairs, alternating")
    ap.add_argument("--serial", default="", help="implementation substring: those groups on "
                    "one thread in the --threads build (a third column)")
    ap.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(_profile(a.model, a.worker, a.profiles, a.serial)))
        return
    runs: dict[tuple[int, str], list[dict]] = {}
    plain, mixed_cfg = (a.threads, ""), (a.threads, a.serial)
    configs = [(1, ""), plain] + ([mixed_cfg] if a.serial else [])
    for _ in range(a.rounds):
        for cfg in configs:
            n, serial = cfg
            env = {**os.environ, "TEMPLTUNE_NUM_THREADS": str(n)}
            out = subprocess.run([sys.executable, __file__, a.model, "--worker", str(n),
                                  "--profiles", str(a.profiles), "--serial", serial],
                                 env=env, check=True, capture_output=True, text=True).stdout
            rows = json.loads(out.strip().splitlines()[-1])
            assert cfg not in runs or [r["key"] for r in rows] == [r["key"] for r in runs[cfg]]
            runs[cfg] = rows if cfg not in runs else [
                {**r, "t": min(r["t"], s["t"])} for r, s in zip(runs[cfg], rows)]
    one, many, mixed = runs[(1, "")], runs[plain], runs[mixed_cfg if a.serial else plain]
    t1, tn = sum(r["t"] for r in one), sum(r["t"] for r in many)
    print(f"{a.model}: groups sum {t1 * 1e3:.2f} ms on 1 thread, {tn * 1e3:.2f} ms on "
          f"{a.threads} (perfect {t1 / a.threads * 1e3:.2f}: {(tn - t1 / a.threads) * 1e3:.2f} "
          f"ms lost)")
    if a.serial:
        print(f"  (third column: groups of {a.serial!r} on 1 thread in the {a.threads}-thread "
              f"run; its groups sum {sum(r['t'] for r in mixed) * 1e3:.2f} ms)")
    rows = sorted(zip(one, many, mixed), key=lambda r: -(r[1]["t"] - r[0]["t"] / a.threads))
    for x, y, z in rows[:a.top]:
        third = f" {z['t'] * 1e6:8.1f}" if a.serial else ""
        print(f"  {x['t'] * 1e6:8.1f} {y['t'] * 1e6:8.1f}{third} us  x{x['t'] / y['t']:4.2f}  "
              f"lost {(y['t'] - x['t'] / a.threads) * 1e6:6.1f}  {x['impl'][:28]:28s} "
              f"{x['key'][:100]}")


if __name__ == "__main__":
    main()
