"""Tune a matrix multiplication for x86 with AutoTVM-style templates (end to end).

The workflow of TVM's "Optimizing Operators with Schedule Templates and AutoTVM" tutorial, with
``tvm`` replaced by ``templtune``:

1. write a template whose schedule choices are knobs of a ConfigSpace;
2. create a tuning task and look at its space;
3. tune it with a builder/runner pair, logging every measurement;
4. build the best configuration found in the log and check its result against numpy.

Run: ``python examples/tune_matmul_x86.py [--n-trial 20] [--size 512] [--tuner random]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import numpy as np

import templtune
from templtune import autotvm, te
from templtune.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner


# 1. The template: a matmul whose two output axes are split by tunable factors.
@autotvm.template("tutorial/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)

    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)

    # schedule
    y, x = s[C].op.axis
    k = s[C].op.reduce_axis[0]

    # 2. the search space
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)

    # 3. schedule according to the config
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)

    return s, [A, B, C]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512, help="N = L = M")
    parser.add_argument("--n-trial", type=int, default=20)
    parser.add_argument("--tuner", choices=["random", "grid", "ga"], default="random")
    parser.add_argument("--log", default=None, help="record file (default: a temporary file)")
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args(argv)

    # The library never configures logging; an application may.
    logging.getLogger("autotvm").addHandler(logging.StreamHandler(sys.stdout))

    n = args.size
    target = args.target
    task = autotvm.task.create("tutorial/matmul", args=(n, n, n, "float32"), target=target)
    print(task.config_space)

    # Builder and runner: defaults as AutoTVM (runs: number=4, repeat=3 -> median recorded).
    measure_option = autotvm.measure_option(
        builder="local", runner=autotvm.LocalRunner(number=5, repeat=3, min_repeat_ms=0))

    log_file = args.log or os.path.join(tempfile.mkdtemp(prefix="templtune_"), "matmul.log")
    tuner_cls = {"random": RandomTuner, "grid": GridSearchTuner, "ga": GATuner}[args.tuner]
    tuner = tuner_cls(task, seed=0) if tuner_cls is not GATuner else GATuner(task, pop_size=8,
                                                                               seed=0)
    tuner.tune(
        n_trial=args.n_trial,
        measure_option=measure_option,
        callbacks=[autotvm.callback.progress_bar(args.n_trial, prefix="[matmul]"),
                   autotvm.callback.log_to_file(log_file)],
    )
    print(f"best config: {tuner.best_config}  ({tuner.best_flops / 1e9:.2f} GFLOPS)")
    print("wall time split:", {k: round(v, 2) if isinstance(v, float) else v
                               for k, v in tuner.tune_stats.items()})

    # 4. Apply the best config from the log, build, and check against numpy.
    with autotvm.apply_history_best(log_file):
        with templtune.target.Target(target):
            s, arg_bufs = matmul(n, n, n, "float32")
            func = templtune.build(s, arg_bufs, target=target)

    rng = np.random.default_rng(0)
    a_np = rng.uniform(size=(n, n)).astype(np.float32)
    b_np = rng.uniform(size=(n, n)).astype(np.float32)
    c_np = a_np.dot(b_np)
    c = np.zeros((n, n), dtype=np.float32)
    func(a_np, b_np, c)
    np.testing.assert_allclose(c, c_np, rtol=1e-4)
    timer = func.time_evaluator(func.entry_name, templtune.cpu(), number=5, repeat=3)
    cost = float(np.median(timer(a_np, b_np, c).results))
    print(f"result correct; best kernel {cost * 1e3:.3f} ms "
          f"({2 * n**3 / cost / 1e9:.2f} GFLOPS); log: {log_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
