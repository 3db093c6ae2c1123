"""Items 18-20 of issue 16 and issue 14's loopback check: the Ray ``RPCRunner``.

A real local Ray instance (started by ``RPCRunner`` itself, on 127.0.0.1), real builds and real
timings. Slow: Ray takes seconds to start on a loaded machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from templtune import auto_scheduler as auto  # noqa: E402
from templtune import te  # noqa: E402
from templtune.autotvm.measure import (  # noqa: E402
    LocalBuilder,
    MeasureErrorNo,
    MeasureInput,
    RPCRunner,
    create_measure_batch,
    measure_option,
)
from templtune.autotvm.task.task import create, get_config, template  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KEY = "templtune-faults-cpu"
DEVICES = 2


@template("faults_ray/vadd")
def vadd(n):
    cfg = get_config()
    cfg.define_knob("f", [1, 2, 4, 8])
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=cfg["f"].val)
    return s, [A, B]


@auto.register_workload("faults_ray_add", override=True)
def add(n: int) -> list:
    a = te.placeholder((n, n), name="A")
    b = te.compute((n, n), lambda i, j: a[i, j] + 1.0, name="B")
    return [a, b]


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    first = RPCRunner(KEY, n_parallel=DEVICES, cooldown_interval=0)  # starts the local instance
    yield first
    first.close()
    ray.shutdown()


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def test_local_cluster_listens_on_loopback_only(cluster):
    ours = _descendants(os.getpid())
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    listening = []
    for line in out.splitlines():
        pids = {int(x.split("=")[1]) for x in line.split("users:")[-1].split(",")
                if x.startswith("pid=")}
        if pids & ours:
            listening.append(line.split()[3])
    assert listening, "the Ray processes should be listening on some port"
    loopback = ("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:")  # the last: IPv4-mapped IPv6
    bad = [a for a in listening if not a.startswith(loopback)]
    assert not bad, f"Ray listens beyond the loopback interface: {bad}"


def _measure(runner, n=4):
    task = create("faults_ray/vadd", (64,), "llvm")
    batch = create_measure_batch(task, measure_option(LocalBuilder(n_parallel=2), runner))
    try:
        return batch([MeasureInput(task.target, task, task.config_space.get(i))
                      for i in range(n)])
    finally:
        batch.close()


def test_more_parallel_slots_than_devices_use_the_devices_there_are(cluster):
    runner = RPCRunner(KEY, n_parallel=2 * DEVICES + 1, number=1, repeat=1, cooldown_interval=0,
                       placement_timeout=20)
    t0 = time.monotonic()
    results = _measure(runner, n=4)
    took = time.monotonic() - t0
    assert [r.error_no for r in results] == [MeasureErrorNo.NO_ERROR] * 4, \
        [r.error_detail[:300] for r in results]
    assert len([a for a in runner._actors if a is not None]) <= DEVICES
    assert took < 120  # the old runner stalled 300 s per batch here


def test_unreachable_cluster_raises_within_bounded_time():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        refused = s.getsockname()[1]
    silent = socket.socket()  # accepts connections, never speaks Ray's protocol
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    code = ("import sys, time\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from templtune.autotvm.measure import RPCRunner\n"
            "for port in sys.argv[1:]:\n"
            "    t0 = time.monotonic()\n"
            "    try:\n"
            "        RPCRunner('k', host='127.0.0.1', port=int(port), connect_timeout=3)\n"
            "    except Exception as e:\n"
            "        print('raised', round(time.monotonic() - t0, 1), type(e).__name__)\n"
            "import os; os._exit(0)  # the abandoned connecting thread must not delay exit\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, str(refused),
                              str(silent.getsockname()[1])],
                             capture_output=True, text=True, timeout=300)
    finally:
        silent.close()
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("raised")]
    assert len(lines) == 2, out.stdout + out.stderr[-2000:]
    assert float(lines[0][1]) < 10 and lines[0][2] == "ConnectionError"  # refused: our check
    assert float(lines[1][1]) < 10 and lines[1][2] == "ConnectionError"  # silent endpoint


def test_auto_scheduler_tunes_through_its_rpc_runner(cluster, tmp_path):
    log = str(tmp_path / "as.json")
    task = auto.SearchTask(func=add, args=(16,), target="llvm")
    runner = auto.RPCRunner(KEY, n_parallel=DEVICES, number=1, repeat=1, min_repeat_ms=0)
    opt = auto.TuningOptions(num_measure_trials=2, num_measures_per_round=2, verbose=0,
                             builder=auto.LocalBuilder(n_parallel=2), runner=runner,
                             measure_callbacks=[auto.RecordToFile(log)])
    try:
        task.tune(opt, search_policy=auto.SketchPolicy(task, seed=0, verbose=0))
    finally:
        runner.close()
    recs = list(auto.RecordReader(log))
    assert len(recs) == 2
    assert all(r.error_no == 0 and r.checked for _, r in recs), [r for _, r in recs]
    best_inp, best_res = auto.load_best_record(log, task.workload_key)
    assert best_res.error_no == 0
