"""Two commits' library code timed on one network, alternating: for each round and each
commit, ``templates/`` and ``templtune/`` are made as at that commit (checked out, files it
lacks removed) and a fresh process
builds the network (opt_level 3, packaged logs) and reports the median of ``--runs`` runs;
the working tree's own files are put back at the end (and on an error). Prints each commit's
times and the minimum of its medians per thread count.

The library must be installed editable from this checkout (``pip install -e .``), so that
the checked-out files are the ones imported; the working tree's ``templates/`` and
``templtune/`` must be committed (the script refuses otherwise: it would overwrite them). Run::

    python3 benchmarks/studies/commit_ab.py /tmp/zoo/efficientnet_b0.onnx 1ca0c19 cc8f8dd \\
        [--threads 1,2] [--rounds 2] [--runs 40]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("templates", "templtune")


def _time(model: str, runs: int) -> float:
    """Median seconds of ``runs`` runs of ``model`` (after 10 warm-up runs)."""
    import time

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from group_profile import build

    from templtune import graph

    lib, name, x = build(model, int(os.environ.get("TEMPLTUNE_NUM_THREADS", "1")))
    gm = graph.GraphModule(lib)
    gm.set_input(name, x)
    for _ in range(10):
        gm.run()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        gm.run()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def _switch(rev: str) -> None:
    """The tree's ``templates/`` and ``templtune/`` as at ``rev``: checked out, and the
    tracked files ``rev`` lacks removed (a module added since would still be imported)."""
    _git("checkout", rev, "--", *PATHS)
    have = set(_git("ls-files", "--", *PATHS).split())
    keep = set(_git("ls-tree", "-r", "--name-only", rev, "--", *PATHS).split())
    for extra in sorted(have - keep):
        (ROOT / extra).unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file or a zoo name (resnet-18, ...)")
    ap.add_argument("commits", nargs=2)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(_time(a.model, a.runs))
        return
    if _git("status", "--porcelain", "--", *PATHS).strip():
        raise SystemExit(f"commit or stash the changes under {', '.join(PATHS)} first")
    threads = [int(t) for t in a.threads.split(",")]
    times: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(a.rounds):
            for rev in a.commits:
                _switch(rev)
                for n in threads:
                    env = {**os.environ, "TEMPLTUNE_NUM_THREADS": str(n)}
                    out = subprocess.run(
                        [sys.executable, __file__, a.model, *a.commits, "--runs", str(a.runs),
                         "--worker"], env=env, check=True, capture_output=True, text=True)
                    t = float(out.stdout.strip().splitlines()[-1])
                    times.setdefault((rev, n), []).append(t)
                    print(f"{rev} {n} thread(s): {t * 1e3:.3f} ms", flush=True)
    finally:
        _git("checkout", "HEAD", "--", *PATHS)
    for n in threads:
        old, new = (min(times[(rev, n)]) for rev in a.commits)
        print(f"{a.model}, {n} thread(s): {a.commits[0]} {old * 1e3:.2f} ms -> "
              f"{a.commits[1]} {new * 1e3:.2f} ms (x{old / new:.3f})")


if __name__ == "__main__":
    main()
