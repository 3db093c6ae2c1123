"""Tune a matmul for an NVIDIA GPU (needs a GPU and pycuda or cuda-python; nvcc on PATH).

The template binds the split axes to blocks and threads; the space is filtered so that a block
has at most 1024 threads (configs beyond the device's limits would be INSTANTIATION_ERRORs anyway).
Run: ``python examples/tune_matmul_cuda.py [--size 1024] [--n-trial 16]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

import templtune
from templtune import autotvm, te
from templtune.autotvm.tuner import GATuner, RandomTuner


@autotvm.template("tutorial/matmul_cuda")
def matmul_cuda(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    cfg = autotvm.get_config()
    y, x = s[C].op.axis
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg.multi_filter(filter=lambda e: e["tile_y"].size[-1] * e["tile_x"].size[-1] <= 1024)
    by, ty = cfg["tile_y"].apply(s, C, y)
    bx, tx = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(by, bx, ty, tx)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tune a CUDA matmul")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--n-trial", type=int, default=16)
    p.add_argument("--tuner", choices=["random", "ga"], default="random")
    args = p.parse_args(argv)
    n = args.size
    task = autotvm.task.create("tutorial/matmul_cuda", (n,), "cuda")
    print(task.config_space)
    log = os.path.join(tempfile.mkdtemp(prefix="templtune_"), "matmul_cuda.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(timeout=60),
                                    runner=autotvm.LocalRunner(number=10, repeat=3, timeout=30))
    tuner = (RandomTuner(task, seed=0) if args.tuner == "random"
             else GATuner(task, pop_size=8, seed=0))
    tuner.tune(n_trial=args.n_trial, measure_option=option,
               callbacks=[autotvm.callback.progress_bar(args.n_trial, prefix="[cuda matmul]"),
                          autotvm.callback.log_to_file(log)])
    print(f"best: {tuner.best_config} {tuner.best_flops / 1e9:.1f} GFLOPS; split "
          f"{ {k: round(v, 2) for k, v in tuner.tune_stats.items()} }")
    with autotvm.apply_history_best(log):
        with templtune.target.Target("cuda"):
            s, bufs = matmul_cuda(n)
            func = templtune.build(s, bufs, target="cuda")
    rng = np.random.default_rng(0)
    a = rng.uniform(size=(n, n)).astype("float32")
    b = rng.uniform(size=(n, n)).astype("float32")
    c = np.zeros((n, n), "float32")
    func(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    print("result correct; log:", log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
