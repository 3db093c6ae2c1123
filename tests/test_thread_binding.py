"""libgomp worker binding (codegen/llvm/affinity.py): workers pinned, callers left free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from templtune import config
from templtune.codegen.llvm import affinity


def _topology(root: Path, cores: dict[int, int]) -> Path:
    for cpu, core in cores.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text("0\n")
        (d / "core_id").write_text(f"{core}\n")
    return root


@pytest.mark.parametrize("cores, order", [
    ({0: 0, 1: 1, 2: 0, 3: 1}, [0, 1, 2, 3]),   # siblings numbered after all cores (Intel)
    ({0: 0, 1: 0, 2: 1, 3: 1}, [0, 2, 1, 3]),   # siblings numbered next to each other
])
def test_cpu_order_puts_one_cpu_per_core_first(tmp_path, cores, order):
    assert affinity.cpu_order(cores, _topology(tmp_path, cores)) == order


def test_cpu_order_without_topology_keeps_numeric_order(tmp_path):
    assert affinity.cpu_order({5, 2, 9}, tmp_path) == [2, 5, 9]


def test_worker_places_text(tmp_path):
    topo = _topology(tmp_path, {1: 0, 3: 1})
    assert affinity.worker_places([3, 1], topo) == "{1,3},{1},{3}"
    assert affinity.worker_places([4], topo) is None


def test_binding_environment_sets_and_restores(monkeypatch):
    for v in affinity.USER_OMP_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with config.scope(bind_threads=True), affinity.binding_environment() as asked:
        assert asked
        assert os.environ["OMP_PROC_BIND"] == "close"
        assert os.environ["OMP_PLACES"].startswith("{0,1},")
    assert "OMP_PROC_BIND" not in os.environ and "OMP_PLACES" not in os.environ


@pytest.mark.parametrize("user", ["OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", None])
def test_binding_environment_leaves_user_settings_alone(monkeypatch, user):
    for v in affinity.USER_OMP_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    if user is not None:
        monkeypatch.setenv(user, "0")
    before = dict(os.environ)
    with config.scope(bind_threads=user is not None), affinity.binding_environment() as asked:
        assert not asked
        assert dict(os.environ) == before


_PROBE = textwrap.dedent("""
    import ctypes, json, os, threading
    import numpy as np
    import templtune
    from templtune import te
    from templtune.codegen.llvm.compile import find_libgomp
    from templtune.codegen.llvm import affinity

    n = 1 << 14
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(b.op)
    outer, _ = s[b].split(b.op.axis[0], factor=256)
    s[b].parallel(outer)
    f = templtune.build(s, [a, b], target="llvm")
    f.set_num_threads(2)
    x = np.arange(n, dtype=np.float32)
    y = np.empty_like(x)
    main_before = sorted(os.sched_getaffinity(0))
    f(x, y)
    seen = {}
    def other():
        before = sorted(os.sched_getaffinity(0))
        f(x, y)
        seen["thread"] = before == sorted(os.sched_getaffinity(0))
    t = threading.Thread(target=other)
    t.start()
    t.join()
    single = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status") as fh:
                allowed = next(l.split()[1] for l in fh if l.startswith("Cpus_allowed_list"))
        except FileNotFoundError:  # a thread that ended while we listed them
            continue
        single += allowed.isdigit()
    print(json.dumps({
        "ok": bool(np.allclose(y, x * 2 + 1)),
        "active": affinity.binding_active(ctypes.CDLL(find_libgomp())),
        "main_free": main_before == sorted(os.sched_getaffinity(0)),
        "thread_free": seen["thread"],
        "pinned_tasks": single,
        "env_clean": not any(os.environ.get(v) for v in ("OMP_PROC_BIND", "OMP_PLACES")),
    }))
""")


def _probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in affinity.USER_OMP_VARIABLES and k != "TEMPLTUNE_BIND_THREADS"}
    # libgomp's binding (templtune's own pool pins its workers itself: test_thread_pool.py)
    clean["TEMPLTUNE_THREAD_POOL"] = "gomp"
    out = subprocess.run([sys.executable, "-c", _PROBE], env={**clean, **env},
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_two_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="binding needs a process allowed on two CPUs or more")


@needs_two_cpus
def test_workers_pinned_and_callers_free():
    r = _probe(TEMPLTUNE_BIND_THREADS="1")
    assert r == {"ok": True, "active": True, "main_free": True, "thread_free": True,
                 "pinned_tasks": r["pinned_tasks"], "env_clean": True}
    # the worker, and no thread that ran the kernel as the team's master
    assert r["pinned_tasks"] >= 1


@needs_two_cpus
@pytest.mark.parametrize("env", [{}, {"TEMPLTUNE_BIND_THREADS": "0"},
                                 {"TEMPLTUNE_BIND_THREADS": "1", "OMP_PROC_BIND": "false"}])
def test_binding_off(env):
    r = _probe(**env)
    assert r["ok"] and not r["active"] and r["main_free"] and r["thread_free"]
    assert r["pinned_tasks"] == 0
