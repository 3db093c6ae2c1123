"""Parallel-loop launch cost under templtune's pool and libgomp's wait policies, on an idle and
on a loaded machine.

Generated parallel loops run on templtune's pool (``pool``) or, with
``TEMPLTUNE_THREAD_POOL=gomp``, on libgomp (``GOMP_parallel``), whose barrier policy decides
what idle workers do: spin (fast hand-off on an idle machine, but a spinning worker burns the
time slice a descheduled peer needs when the machine is oversubscribed) or sleep on a futex
(``default``, ``passive``, ``active``, ``spin10k``). Policies are read once per process, so each
setting is timed in a child process; ``--load N`` adds N busy-looping processes (the
oversubscribed case: other tuning jobs, a build). Figures: ``benchmarks/results/scaling.txt``.

Kernels: a small element-wise map (~10 us of work), a 256^2 x 256 matmul (~1 ms) and a 1024^3
matmul, all with a parallel outer loop, 2 threads. Prints the median time per call per policy.

Run: ``python benchmarks/wait_policy.py [--load 0,2] [--policies pool,default,passive]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

_GOMP = {"TEMPLTUNE_THREAD_POOL": "gomp"}
POLICIES = {
    "pool": {"TEMPLTUNE_THREAD_POOL": "templtune"},
    "default": _GOMP,
    "passive": {**_GOMP, "OMP_WAIT_POLICY": "passive"},
    "active": {**_GOMP, "OMP_WAIT_POLICY": "active"},
    "spin10k": {**_GOMP, "GOMP_SPINCOUNT": "10000"},
}

CHILD = r"""
import json, sys, time
import numpy as np
import templtune
from templtune import te

def matmul(n):
    A = te.placeholder((n, n), name="A"); B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    s[C].parallel(i)
    return s, [A, B, C]

def ew(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=256)
    s[B].parallel(o)
    s[B].vectorize(i)
    return s, [A, B]

out = {}
for name, (s, args) in {"ew 64K": ew(1 << 16), "matmul 256": matmul(256),
                        "matmul 1024": matmul(1024)}.items():
    f = templtune.build(s, args, "llvm")
    arrs = [np.random.rand(*[int(d) for d in t.shape]).astype("float32") for t in args]
    r = f.time_evaluator(f.entry_name, number=5, repeat=7, min_repeat_ms=50)(*arrs)
    out[name] = r.median
print(json.dumps(out))
"""


def _burn(stop: float) -> None:
    x = 0
    while time.time() < stop:
        x += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", default="0,2", help="busy processes to add, per scenario")
    ap.add_argument("--policies", default="pool,default,passive")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    rows = []
    for load in (int(x) for x in a.load.split(",")):
        burners = [mp.Process(target=_burn, args=(time.time() + 3600,)) for _ in range(load)]
        for p in burners:
            p.start()
        try:
            for pol in a.policies.split(","):
                env = {**os.environ, **POLICIES[pol], "PYTHONPATH": root,
                       "TEMPLTUNE_NUM_THREADS": str(a.threads)}
                res = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True,
                                     capture_output=True, text=True)
                times = json.loads(res.stdout.strip().splitlines()[-1])
                rows.append((load, pol, times))
                print(f"load {load}  {pol:8s}  " + "  ".join(
                    f"{k}: {v * 1e3:8.3f} ms" for k, v in times.items()), flush=True)
        finally:
            for p in burners:
                p.terminate()
                p.join()


if __name__ == "__main__":
    main()
