"""The first parallel region after an idle gap, under libgomp's wait policy (a study).

A 64K-element map with a parallel outer loop is called back to back, then ``--rounds`` times
after ``IDLE`` seconds of sleep; the first call's time is summarised. On a 2-vCPU KVM guest the
worker woken for that call can be queued on the caller's vCPU (the guest sees the idle vCPU as
preempted), where the caller spins at the barrier for libgomp's spin count before it sleeps,
so the call costs about the spin time. Compare ``GOMP_SPINCOUNT=1000`` or
``OMP_WAIT_POLICY=passive`` before ``python3``. Run::

    python3 benchmarks/studies/gomp_wake.py IDLE THREADS [--rounds 40]
"""

import argparse
import time

import numpy as np

import templtune
from templtune import te


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("idle", type=float, help="seconds of sleep before each timed call")
    ap.add_argument("threads", type=int)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    n = 1 << 16
    src = te.placeholder((n,), name="A")
    dst = te.compute((n,), lambda i: src[i] * 2.0, name="B")
    s = te.create_schedule(dst.op)
    outer, _ = s[dst].split(dst.op.axis[0], factor=1024)
    s[dst].parallel(outer)
    f = templtune.build(s, [src, dst], target="llvm")
    f.set_num_threads(args.threads)
    a, b = np.ones(n, np.float32), np.empty(n, np.float32)
    for _ in range(100):
        f(a, b)
    ms = []
    for _ in range(args.rounds):
        time.sleep(args.idle)
        t = time.perf_counter()
        f(a, b)
        ms.append(1e3 * (time.perf_counter() - t))
    out = np.array(ms)
    print(f"idle {args.idle} s, {args.threads} threads: first call median {np.median(out):.3f} "
          f"ms, p90 {np.percentile(out, 90):.3f}, max {out.max():.3f}, "
          f"{int((out > 2).sum())} of {len(out)} over 2 ms")


if __name__ == "__main__":
    main()
