"""CUDA candidates through LocalBuilder/LocalRunner, run by the CPU emulator backend (no GPU).

With a GPU, ``TEMPLTUNE_CUDA_BACKEND`` unset lets the runtime pick pycuda / cuda-python; the same
test then measures on the device (see ``scripts/gpu_check.sh``).
"""

from __future__ import annotations

import os

import pytest

from templtune import autotvm, te
from templtune.autotvm.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    create_measure_batch,
    measure_option,
)

N = 16


@autotvm.template("test_measure_cuda/matmul")
def matmul(n):
    cfg = autotvm.get_config()
    cfg.define_knob("bug", [0, 1])  # 1: drop one reduction term (a wrong answer)
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n - cfg["bug"].val), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg.define_split("ty", y, num_outputs=2)
    cfg.define_split("tx", x, num_outputs=2)
    by, ty = cfg["ty"].apply(s, C, y)
    bx, tx = cfg["tx"].apply(s, C, x)
    s[C].reorder(by, bx, ty, tx)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


@pytest.fixture()
def emulated(monkeypatch):
    if "TEMPLTUNE_TEST_REAL_GPU" not in os.environ:
        monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")


def _measure(task, indices):
    opt = measure_option(LocalBuilder(n_parallel=2, timeout=60),
                         LocalRunner(number=1, repeat=1, cooldown_interval=0, timeout=60))
    batch = create_measure_batch(task, opt)
    try:
        space = task.config_space
        return batch([MeasureInput(task.target, task, space.get(i)) for i in indices])
    finally:
        batch.close()


def _find(space, bug, threads):
    for i in range(space.range_length):
        c = space.get(i)
        if c["bug"].val == bug and c["ty"].size[-1] * c["tx"].size[-1] == threads:
            return i
    raise AssertionError("no such config")


def test_cuda_candidates_checked_and_limited(emulated):
    task = autotvm.task.create("test_measure_cuda/matmul", (N,), "cuda -max_threads_per_block=64")
    space = task.config_space
    ok, wrong, too_many_threads = _measure(
        task, [_find(space, 0, 16), _find(space, 1, 16), _find(space, 0, 256)])
    assert ok.error_no == MeasureErrorNo.NO_ERROR, ok.error_detail
    assert ok.costs[0] > 0
    assert wrong.error_no == MeasureErrorNo.WRONG_ANSWER, wrong.error_detail
    assert too_many_threads.error_no == MeasureErrorNo.INSTANTIATION_ERROR
