"""templtune's thread pool (codegen/llvm/pool.py): parallel kernels stay correct whoever calls
them, however often, from however many threads, in forked children, with workers asleep or
pinned. Oracles: numpy, and the kernel's own view of the process (``/proc/self/task``).

Each scenario runs in a fresh interpreter with a timeout, so a deadlock fails the test instead
of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from templtune.codegen.llvm import pool

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not pool.available(), reason="the pool needs x86-64 Linux")

_KERNEL = """
    import os, numpy as np, templtune
    from templtune import te

    def scaled(n, k, threads):
        a = te.placeholder((n,), name="A")
        b = te.compute((n,), lambda i: a[i] * float(k) + 1.0, name="B")
        s = te.create_schedule(b.op)
        outer, _ = s[b].split(b.op.axis[0], factor=64)
        s[b].parallel(outer)
        f = templtune.build(s, [a, b], f"llvm -num-cores={threads}")
        assert "templtune_parallel_launch" in f.get_source()
        return f

    def check(f, n, k, rounds, seed=0):
        rng = np.random.default_rng(seed)
        for _ in range(rounds):
            x = rng.random(n, dtype="float32")
            y = np.zeros(n, "float32")
            f(x, y)
            # one rounding apart at most: LLVM may contract the multiply-add into an FMA
            np.testing.assert_allclose(y, x * np.float32(k) + np.float32(1), rtol=2e-7)

    def tasks():
        return len(os.listdir("/proc/self/task"))
"""


def _run(code: str, env: dict[str, str] | None = None) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TEMPLTUNE_")}
    full.update(env or {})
    full["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_KERNEL) + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=240, env=full, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_thread_counts_above_the_cpus_and_uneven_chunks() -> None:
    out = _run("""
        for threads in (2, 3, 8):
            for n in (128, 1000, 64 * 37 + 5):
                check(scaled(n, threads, threads), n, threads, 50)
        print("OK", tasks())
    """)
    word, n_tasks = out.split()
    # the pool grew to the largest team asked for (7 workers) and no further
    assert word == "OK" and int(n_tasks) >= 8


def test_the_launch_that_makes_a_worker_shares_its_work_with_it() -> None:
    """The first 2-thread call creates the worker, which must take chunks of that very call
    (it once waited for the next one): its CPU time after the call is a good part of it."""
    out = _run("""
        n = 768
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        s[C].parallel(s[C].op.axis[0])
        f = templtune.build(s, [A, B, C], "llvm -num-cores=2")
        a, b = np.random.rand(n, n).astype("float32"), np.random.rand(n, n).astype("float32")
        c = np.zeros((n, n), "float32")
        before = set(os.listdir("/proc/self/task"))
        t0 = os.times()
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4)
        (worker,) = set(os.listdir("/proc/self/task")) - before
        with open(f"/proc/self/task/{worker}/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[11])  # utime
        total = (os.times().user - t0.user) * os.sysconf("SC_CLK_TCK")
        print(ticks, int(total))
    """)
    worker, total = map(int, out.split())
    assert total >= 10, f"the call was too short to tell ({total} ticks)"
    assert worker >= total // 5, (worker, total)


def test_concurrent_callers_share_the_pool_without_deadlock() -> None:
    """Callers in several threads at once (ctypes drops the GIL): one holds the pool, the
    others compute their loops alone; every result is right."""
    out = _run("""
        from concurrent.futures import ThreadPoolExecutor
        fs = [scaled(4096 + 64 * k, k + 2, 2) for k in range(4)]
        def work(k):
            check(fs[k], 4096 + 64 * k, k + 2, 300, seed=k)
            return k
        with ThreadPoolExecutor(4) as ex:
            assert sorted(ex.map(work, range(4))) == [0, 1, 2, 3]
        print("OK")
    """)
    assert out.strip() == "OK"


def test_sleeping_workers_are_woken() -> None:
    """With no spinning, every call finds the workers asleep on the futex (idle gaps too)."""
    out = _run("""
        import time
        f = scaled(1 << 14, 3, 2)
        for i in range(200):
            check(f, 1 << 14, 3, 1, seed=i)
            if i % 20 == 0:
                time.sleep(0.01)
        print("OK")
    """, env={"TEMPLTUNE_POOL_SPIN": "0"})
    assert out.strip() == "OK"


def test_a_forked_child_gets_its_own_workers() -> None:
    out = _run("""
        import multiprocessing as mp
        f = scaled(4096, 5, 2)
        check(f, 4096, 5, 5)
        def child(_):
            before = tasks()
            g = scaled(4096, 7, 2)
            check(g, 4096, 7, 20)
            check(f, 4096, 5, 20)
            return before, tasks()
        with mp.get_context("fork").Pool(1) as p:
            (before, after), = p.map(child, [0])
        print("OK", before, after)
    """)
    word, before, after = out.split()
    # the parent's worker does not exist in the child; the child's first 2-thread call made one
    assert word == "OK" and int(after) == int(before) + 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs 2 CPUs")
def test_bound_workers_are_pinned_and_the_caller_stays_free() -> None:
    out = _run("""
        f = scaled(4096, 2, 2)
        check(f, 4096, 2, 5)
        main = os.getpid()
        allowed = {}
        for tid in os.listdir("/proc/self/task"):
            allowed[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
        print(sorted(allowed[main]), [v for t, v in allowed.items() if len(v) == 1])
    """, env={"TEMPLTUNE_BIND_THREADS": "1"})
    from templtune.codegen.llvm.affinity import cpu_order

    order = cpu_order(os.sched_getaffinity(0))
    caller, pinned = out.strip().split("] [", 1)
    assert caller + "]" == str(sorted(os.sched_getaffinity(0)))
    assert f"[{order[1]}]" in pinned  # the first worker on the second CPU of cpu_order


def test_the_pools_code_outlives_its_references() -> None:
    """Workers spin in the pool's JIT code (here a spin that never ends): dropping every
    reference to its engine, as interpreter shutdown clears module globals, must not free that
    code under them (it did: a segmentation fault)."""
    out = _run("""
        import gc, time
        from templtune.codegen.llvm import pool
        f = scaled(4096, 3, 2)
        check(f, 4096, 3, 3)
        pool._Pool.engine = None
        gc.collect()
        time.sleep(0.2)
        print("OK")
    """, env={"TEMPLTUNE_POOL_SPIN": str(2**31 - 1)})
    assert out.strip() == "OK"
