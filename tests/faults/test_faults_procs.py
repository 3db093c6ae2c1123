"""Items 12 and 17 of issue 16: no process leaks from the measurement workers.

Real processes only: templates that start ``sleep 300`` children, a stand-in ``nvcc`` (a shell
script that starts a child and waits, as nvcc waits for cicc/ptxas) that outlives the build
timeout, a SIGKILL of the tuning process, and a short-lived thread that runs ``tune()``.
Every leak is checked by pid in ``/proc``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from templtune import te
from templtune.autotvm.measure import LocalBuilder, LocalRunner, MeasureErrorNo, measure_option
from templtune.autotvm.task.task import create, get_config, template
from templtune.autotvm.tuner import GridSearchTuner

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, i.e. dead but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """Wait until none of ``pids`` runs; returns those still running at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def read_pids(directory: Path, pattern: str = "*.pid") -> list[int]:
    return [int(x) for f in sorted(directory.glob(pattern)) for x in f.read_text().split()]


def spawn_sleepers(pid_dir: str, tag: str) -> None:
    """Start two ``sleep 300``: one in the worker's process group, one in a group of its own
    (as nvcc is started), and record their pids."""
    a = subprocess.Popen(["sleep", "300"])
    b = subprocess.Popen(["sleep", "300"], start_new_session=False,
                         preexec_fn=os.setpgrp)  # noqa: PLW1509 - test only
    Path(pid_dir, f"{tag}.{os.getpid()}.pid").write_text(f"{a.pid} {b.pid}")


@template("faults_procs/spawner")
def spawner(pid_dir, tuner_pid):
    cfg = get_config()
    # NOTE: config 0 ("plain") is the one the runner instantiates for its reference
    cfg.define_knob("mode", ["plain", "spawn_and_hang", "spawn_ok"])
    if os.getpid() != tuner_pid and cfg["mode"].val != "plain":  # only in a build worker
        spawn_sleepers(pid_dir, cfg["mode"].val)
        if cfg["mode"].val == "spawn_and_hang":
            while True:
                time.sleep(0.01)
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    return te.create_schedule(B.op), [A, B]


def test_build_timeout_and_close_kill_what_a_template_started(tmp_path):
    task = create("faults_procs/spawner", (str(tmp_path), os.getpid()), "llvm")
    builder = LocalBuilder(timeout=4, n_parallel=3)
    runner = LocalRunner(number=1, repeat=1, cooldown_interval=0)
    seen = {}
    try:
        GridSearchTuner(task).tune(n_trial=3, measure_option=measure_option(builder, runner),
                                   callbacks=[lambda t, ins, rs: seen.update(
                                       {i.config["mode"].val: r for i, r in zip(ins, rs)})])
        assert seen["spawn_and_hang"].error_no == MeasureErrorNo.BUILD_TIMEOUT
        assert seen["spawn_ok"].error_no == MeasureErrorNo.NO_ERROR, seen["spawn_ok"]
        hung = read_pids(tmp_path, "spawn_and_hang.*.pid")
        ok = read_pids(tmp_path, "spawn_ok.*.pid")
        assert len(hung) == 2 and len(ok) >= 2
        # the timeout killed the hung worker's children; the warm worker's children still run
        assert wait_gone(hung) == [], "children of a timed-out build survived"
        assert all(alive(p) for p in ok)
    finally:
        builder.close()
        runner.close()
    assert wait_gone(ok) == [], "children of a build worker survived close()"


FAKE_NVCC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, fake"; exit 0; fi
sleep 300 &
echo "$$ $!" > "{pid_dir}/nvcc.$$.pid"
wait
"""


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    """A stand-in nvcc on PATH, a private temp dir for this process and its workers."""
    bin_dir, pid_dir, tmp = tmp_path / "bin", tmp_path / "pids", tmp_path / "tmp"
    for d in (bin_dir, pid_dir, tmp):
        d.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(pid_dir=pid_dir))
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return pid_dir, tmp


def test_nvcc_timeout_kills_its_children_and_removes_its_temp_dir(fake_nvcc, monkeypatch):
    from templtune.codegen.cuda import compile as cuda_compile
    from templtune.errors import CodegenError

    pid_dir, tmp = fake_nvcc
    monkeypatch.setattr(cuda_compile, "NVCC_TIMEOUT_S", 2.0)
    with pytest.raises(CodegenError, match="nvcc timed out"):
        cuda_compile.compile_cuda("__global__ void k() {}", use_cache=False)
    pids = read_pids(pid_dir)
    assert len(pids) == 2
    assert wait_gone(pids, 10) == [], "nvcc's child outlived nvcc's timeout"
    assert list(tmp.iterdir()) == []


@template("faults_procs/slow_nvcc")
def slow_nvcc(n, tuner_pid):
    from templtune.codegen.cuda.compile import compile_cuda

    get_config().define_knob("x", [0])
    if os.getpid() != tuner_pid:
        compile_cuda("__global__ void k() {}", use_cache=False)  # hangs in the fake nvcc
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    return te.create_schedule(B.op), [A, B]


def test_build_timeout_during_nvcc_leaves_no_process_and_no_temp_dir(fake_nvcc):
    pid_dir, tmp = fake_nvcc
    task = create("faults_procs/slow_nvcc", (8, os.getpid()), "llvm")
    builder = LocalBuilder(timeout=4, n_parallel=1)
    runner = LocalRunner(number=1, repeat=1, cooldown_interval=0)
    seen = []
    try:
        GridSearchTuner(task).tune(n_trial=1, measure_option=measure_option(builder, runner),
                                   callbacks=[lambda t, ins, rs: seen.extend(rs)])
        assert [r.error_no for r in seen] == [MeasureErrorNo.BUILD_TIMEOUT]
        pids = read_pids(pid_dir)
        assert len(pids) == 2
        assert wait_gone(pids) == [], "nvcc (or its child) outlived the build timeout"
    finally:
        builder.close()
        runner.close()
    leftovers = [p.name for p in tmp.rglob("*")]
    assert not [n for n in leftovers if n.startswith("templtune_")], leftovers


_TUNER = """
import os, sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {here!r})
import test_faults_procs as t
from templtune.autotvm.measure import LocalBuilder, LocalRunner, measure_option
from templtune.autotvm.task.task import create
from templtune.autotvm.tuner import GridSearchTuner

task = create("faults_procs/spawner", (sys.argv[1], os.getpid()), "llvm")
opt = measure_option(LocalBuilder(timeout=600, n_parallel=3), LocalRunner(timeout=600))
GridSearchTuner(task).tune(n_trial=3, measure_option=opt)   # the hung build never returns
"""


def _worker_pids(parent: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def test_sigkill_of_the_tuner_takes_workers_and_their_children(tmp_path):
    script = tmp_path / "tuner.py"
    script.write_text(_TUNER.format(root=str(ROOT), here=str(Path(__file__).parent)))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(pid_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(read_pids(pid_dir)) < 4:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            time.sleep(0.05)
        sleepers = read_pids(pid_dir)
        assert len(sleepers) == 4, "both builds should have started their children"
        workers = _worker_pids(proc.pid)
        assert workers
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone(workers) == [], "workers outlived the SIGKILLed tuner"
    assert wait_gone(sleepers) == [], "children of the workers outlived the SIGKILLed tuner"


def test_warm_workers_survive_the_thread_that_started_them(tmp_path):
    task = create("faults_procs/spawner", (str(tmp_path), os.getpid()), "llvm")
    builder = LocalBuilder(timeout=60, n_parallel=1)
    runner = LocalRunner(number=1, repeat=1, cooldown_interval=0)
    opt = measure_option(builder, runner)
    cfg_ok = task.config_space.get(2)
    assert cfg_ok["mode"].val == "spawn_ok"

    class OnlyOk(GridSearchTuner):
        def next_batch(self, batch_size):
            return [cfg_ok]

    try:
        t = threading.Thread(target=lambda: OnlyOk(task).tune(n_trial=1, measure_option=opt))
        t.start()
        t.join(300)
        assert not t.is_alive()
        pids = [w.proc.pid for p in (builder._pool, runner._pool) for w in p._workers]
        time.sleep(1.0)  # PR_SET_PDEATHSIG would have fired by now
        assert all(alive(p) for p in pids), "a worker died with the thread that started it"
        tuner = OnlyOk(task)
        tuner.tune(n_trial=1, measure_option=opt)
        assert tuner.best_config is not None
        assert [w.proc.pid for p in (builder._pool, runner._pool) for w in p._workers] == pids
    finally:
        builder.close()
        runner.close()
    assert wait_gone(pids) == []


def test_a_worker_whose_request_pipe_closes_ends_what_it_started(tmp_path):
    """The worker's main loop sees EOF before (or without) the lifeline: it must end its
    session itself, not return and let the interpreter exit past the lifeline thread."""
    from templtune.measure.pool import _Worker

    pid_file = tmp_path / "orphan.pid"
    w = _Worker(())
    try:
        assert w.wait_ready(120)
        # a shell that leaves an orphaned ``sleep`` behind: reparented, but still in the session
        w.conn.send((os.system, (f"sleep 300 & echo $! > {pid_file}",)))
        assert w.conn.poll(60) and w.conn.recv().ok
        orphan = int(pid_file.read_text())
        assert alive(orphan)
        w.conn.close()  # the lifeline stays open: only the request pipe says "stop"
        assert wait_gone([orphan]) == [], "a worker's orphan outlived the worker"
        assert wait_exit_ok(w)
    finally:
        w.kill()


def wait_exit_ok(w) -> bool:
    from templtune.measure.procs import wait_exit

    return wait_exit(w.proc.pid, 30)
