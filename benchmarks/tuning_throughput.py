"""Tuning throughput: trials per second on a 512^3 dense template, and where the time goes.

Runs a RandomTuner with the default LocalBuilder/LocalRunner (unless overridden) and prints
trials/s plus the wall-time split: building (process pool, including waiting for worker
start-up), running (measurement process: one-time reference set-up ``runner_setup_s``, an
estimate ``run_kernel_s_est`` of the time inside the kernel (1 checking call + number x repeat
timed calls per candidate), the cooldown sleeps (once per batch) and the rest,
``run_fixed_s_est``: loading, argument copies, the check, process round trips) and tuner
overhead (proposal logic, callbacks).

Run: ``python benchmarks/tuning_throughput.py [--n-trial 40] [--cooldown 0.1] [--size 512]``.
Note: AutoTVM sleeps ``cooldown_interval`` (default 0.1 s) after every candidate, which caps the
default options at < 10 trials/s on their own; templtune keeps the 0.1 s default but sleeps once
per batch (before the batch's runs). The kernel calls themselves bound the rate: with the
defaults (number=4, repeat=3) each candidate calls the kernel 13 times, so a 512^3 candidate at
20 GFLOPS (13 ms a call) alone takes 0.17 s. ``--cooldown 0`` and a small ``--size`` show the
machinery's own rate.

Measured 2026-11-30 on the 2-core dev box (load average ~1.2-1.8 from other jobs), 40 trials,
defaults, before -> after the throughput work (no double warm-up, cooldown per batch, workers
launched and importing the compiler while the first batch builds):
512^3: 2.6-2.7 -> 3.8 trials/s (wall 10.5 s: kernel calls ~6 s, cooldown 2 s, builds 1.5-1.8 s,
runner fixed costs 0.3-0.6 s, reference set-up 0.3 s, tuner 0.02 s); ``--cooldown 0``: 3.9 -> 4.8.
64^3: 6.3 -> 10.3 trials/s; ``--cooldown 0``: 17 -> 19 (builds are ~85% of the time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from templtune import autotvm, te
from templtune.autotvm.tuner import RandomTuner


@autotvm.template("benchmark/dense")
def dense(N, L, M, dtype):
    # NOTE: C = A @ B with B stored (L, M), so the vectorized inner axis is contiguous; a 512^3
    # "dense" workload in FLOPs. Three split knobs: 10 x 4 x 10 = 400 configs.
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2, filter=lambda e: e.size[-1] in (8, 16, 32, 64))
    cfg.define_split("tile_k", k, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    s[C].reorder(yo, xo, ko, yi, ki, xi)
    s[C].vectorize(xi)
    s[C].parallel(yo)
    return s, [A, B, C]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="AutoTVM tuning throughput")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--n-trial", type=int, default=40)
    p.add_argument("--cooldown", type=float, default=0.1, help="LocalRunner cooldown_interval")
    p.add_argument("--n-parallel", type=int, default=None, help="LocalBuilder n_parallel")
    p.add_argument("--no-check", action="store_true", help="check_correctness=False")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    n = args.size
    task = autotvm.task.create("benchmark/dense", (n, n, n, "float32"), "llvm")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=args.n_parallel),
        runner=autotvm.LocalRunner(cooldown_interval=args.cooldown,
                                   check_correctness=not args.no_check))
    tuner = RandomTuner(task, seed=0)
    runner = option["runner"]
    kernel = {"s": 0.0, "batches": 0}

    def count_kernel_time(_tuner, _inputs, results):
        # NOTE: estimate of the seconds spent inside the kernel: one checking call plus
        # number x repeat timed calls per successful candidate (the recorded cost is the median
        # round, a fair per-call estimate).
        kernel["batches"] += 1
        calls = 1 + runner.number * runner.repeat
        kernel["s"] += sum(r.mean_cost * calls for r in results if r.ok)

    c0 = time.process_time()
    t0 = time.perf_counter()
    tuner.tune(n_trial=args.n_trial, measure_option=option, callbacks=[count_kernel_time])
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    st = dict(tuner.tune_stats)
    cooldown_s = args.cooldown * kernel["batches"]
    out = {
        "size": n, "trials": st["trials"], "errors": st["errors"], "wall_s": round(wall, 3),
        "trials_per_s": round(st["trials"] / wall, 2),
        "build_s": round(st["build_s"], 3), "run_s": round(st["run_s"], 3),
        "runner_setup_s": round(option["runner"].setup_time, 3),
        "run_kernel_s_est": round(kernel["s"], 3),
        "run_cooldown_s": round(cooldown_s, 3),
        "run_fixed_s_est": round(st["run_s"] - kernel["s"] - cooldown_s
                                 - option["runner"].setup_time, 3),
        "tuner_process_cpu_s": round(cpu, 3),
        "overhead_s": round(st["overhead_s"], 3), "cooldown": args.cooldown,
        "check_correctness": not args.no_check,
        "best_gflops": round(tuner.best_flops / 1e9, 2),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>18}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
