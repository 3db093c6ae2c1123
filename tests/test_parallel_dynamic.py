"""Parallel loops claim chunks of iterations from a shared counter (dynamic schedule), so a
thread whose core is busy does not hold the others up; every iteration still runs once."""

from __future__ import annotations

import numpy as np
import pytest

from templtune.build_module import build
from templtune.codegen.llvm.render import _CHUNKS_PER_THREAD, render
from templtune.lower.ir import Buffer, For, ForKind, Load, PrimFunc, Store
from templtune.te.expr import Var, const


def _count_loop(n: int, lo: int, extent: int) -> PrimFunc:
    """``A[i] = A[i] + i`` for ``i`` in ``[lo, lo + extent)``, parallel: an iteration run
    twice (or never) shows in ``A``."""
    a = Buffer("A", (const(n),), "int32")
    i = Var("i")
    body = For(i, const(lo), const(extent), ForKind.PARALLEL,
               Store(a, i, Load(a, i) + i))
    return PrimFunc("count", (a,), body)


def test_parallel_body_claims_chunks_from_a_shared_counter():
    ir = render(_count_loop(64, 0, 64)).ir
    assert "atomicrmw add ptr" in ir
    assert "omp_get_thread_num" not in ir  # no static split by thread id
    # the counter is shared by the threads: never declared noalias
    body = next(line for line in ir.splitlines() if line.startswith("define internal")
                and ".body" in line)
    assert "ptr %c2" in body and "noalias %c2" not in body


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("lo,extent", [(0, 1), (0, 7), (3, 16), (5, 33), (0, 200)])
def test_every_iteration_runs_once(threads, lo, extent):
    n = lo + extent
    mod = build(_count_loop(n, lo, extent))
    mod.set_num_threads(threads)
    for rounds in (1, 2):
        out = np.zeros(n, "int32")
        for _ in range(rounds):
            mod(out)
        want = np.where(np.arange(n) >= lo, np.arange(n) * rounds, 0).astype("int32")
        np.testing.assert_array_equal(out, want)


def test_chunks_per_thread_bound_the_imbalance():
    # several chunks per thread: the last chunk a slow thread holds is a small share
    assert 4 <= _CHUNKS_PER_THREAD <= 64
