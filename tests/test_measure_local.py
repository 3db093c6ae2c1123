"""LocalBuilder + LocalRunner on real builds: correct timing, and every failure mode isolated."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import templtune
from templtune import te
from templtune.autotvm import record
from templtune.autotvm.callback import log_to_file
from templtune.autotvm.history import apply_history_best
from templtune.autotvm.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    create_measure_batch,
    measure_option,
)
from templtune.autotvm.task.task import create, get_config, template
from templtune.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner
from templtune.errors import InstantiationError

N = 32


@template("test_measure_local/matmul")
def matmul(n, dtype):
    A = te.placeholder((n, n), name="A", dtype=dtype)
    B = te.placeholder((n, n), name="B", dtype=dtype)
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    return s, [A, B, C]


MODES = ["ok", "wrong", "segv", "hang_run", "hang_build", "raise", "invalid", "build_crash"]
EXPECTED = {
    "ok": MeasureErrorNo.NO_ERROR,
    "wrong": MeasureErrorNo.WRONG_ANSWER,
    "segv": MeasureErrorNo.RUNTIME_DEVICE,
    "hang_run": MeasureErrorNo.RUN_TIMEOUT,
    "hang_build": MeasureErrorNo.BUILD_TIMEOUT,
    "raise": MeasureErrorNo.COMPILE_HOST,
    "invalid": MeasureErrorNo.INSTANTIATION_ERROR,
    "build_crash": MeasureErrorNo.COMPILE_HOST,
}


@template("test_measure_local/faulty")
def faulty(n):
    cfg = get_config()
    cfg.define_knob("mode", MODES)
    cfg.define_knob("tile", [4, 8])
    cfg.multi_filter(filter=lambda e: e["mode"].val == "ok" or e["tile"].val == 4)
    mode = cfg["mode"].val
    A = te.placeholder((n, n), name="A", dtype="float32")
    B = te.placeholder((n, n), name="B", dtype="float32")
    if mode == "hang_build":
        while True:
            pass
    if mode == "build_crash":
        import ctypes

        ctypes.string_at(0)
    if mode == "raise":
        raise RuntimeError("this template fails to compile")
    if mode == "invalid":
        raise InstantiationError("invalid knob combination")
    if mode == "wrong":
        k = te.reduce_axis((0, n - 1), name="k")  # drops one term: a wrong answer
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    elif mode == "segv":
        k = te.reduce_axis((0, n), name="k")
        far = 1 << 24  # rows: reads 2 GiB past A
        C = te.compute((n, n), lambda i, j: te.sum(A[i + far, k] * B[k, j], axis=k), name="C")
    elif mode == "hang_run":
        k1 = te.reduce_axis((0, 1 << 20), name="k1")
        k2 = te.reduce_axis((0, 1 << 20), name="k2")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, (k1 + k2) % n] * B[(k1 * k2) % n, j],
                                                   axis=[k1, k2]), name="C")
    else:
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, _ = s[C].op.axis
    s[C].split(y, factor=cfg["tile"].val)
    return s, [A, B, C]


def _local(timeout=10, **runner_kw):
    runner_kw.setdefault("cooldown_interval", 0)
    return measure_option(LocalBuilder(timeout=timeout, n_parallel=2),
                          LocalRunner(timeout=timeout, **runner_kw))


def measure_first_configs(opt, n=4):
    """Measure the first ``n`` configs of the matmul template with ``opt``."""
    task = create("test_measure_local/matmul", (N, "float32"), "llvm")
    batch = create_measure_batch(task, opt)
    try:
        return batch([MeasureInput(task.target, task, task.config_space.get(i))
                      for i in range(n)])
    finally:
        batch.close()


def tune_every_failure_mode(opt):
    """Grid-search the faulty template with ``opt``; returns (tuner, {index: (mode, result)})."""
    task = create("test_measure_local/faulty", (N,), "llvm")
    assert len(task.config_space) == len(MODES) + 1
    seen = {}
    tuner = GridSearchTuner(task)
    tuner.tune(n_trial=100, measure_option=opt,
               callbacks=[lambda t, ins, rs: seen.update(
                   {i.config.index: (i.config["mode"].val, r) for i, r in zip(ins, rs)})])
    return tuner, seen


def test_measure_batch_good_configs():
    opt = _local(number=2, repeat=3)
    results = measure_first_configs(opt)
    for res in results:
        assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_detail
        assert len(res.costs) == 1  # repeat=3: min and max dropped
        assert 0 < res.costs[0] < 1 and res.all_cost >= res.costs[0]
    assert opt["runner"].ref_input is not None and len(opt["runner"].ref_input) == 3


def test_every_failure_mode_is_isolated():
    tuner, seen = tune_every_failure_mode(_local(timeout=3))
    assert len(seen) == len(MODES) + 1
    for mode, res in seen.values():
        assert res.error_no == EXPECTED[mode], (mode, res.error_no, res.error_detail[:500])
    assert tuner.best_config is not None and tuner.best_config["mode"].val == "ok"


def test_ref_input_is_forwarded():
    task = create("test_measure_local/matmul", (N, "float32"), "llvm")
    runner = LocalRunner(cooldown_interval=0, number=1, repeat=1)
    a = np.ones((N, N), "float32")
    with pytest.warns(RuntimeWarning):
        runner.ref_input = [a, a, np.zeros((N, N), "float32")]
    opt = measure_option(LocalBuilder(n_parallel=1), runner)
    batch = create_measure_batch(task, opt)
    try:
        (res,) = batch([MeasureInput(task.target, task, task.config_space.get(3))])
    finally:
        batch.close()
    assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_detail
    assert runner.ref_input[0] is a


@pytest.mark.parametrize("cls", [RandomTuner, GATuner])
def test_tune_then_apply_history_best(tmp_path, cls):
    log = str(tmp_path / "mm.log")
    task = create("test_measure_local/matmul", (N, "float32"), "llvm")
    tuner = cls(task, seed=0) if cls is RandomTuner else cls(task, pop_size=4, seed=0)
    tuner.tune(n_trial=6, measure_option=_local(number=2, repeat=1),
               callbacks=[log_to_file(log)])
    recs = list(record.load_from_file(log))
    assert len(recs) == 6 and all(r.error_no == 0 for _, r in recs)
    with apply_history_best(log):
        with templtune.target.Target("llvm"):
            s, args = matmul(N, "float32")
            f = templtune.build(s, args, target="llvm")
    a = np.random.default_rng(0).random((N, N), dtype=np.float32)
    b = np.random.default_rng(1).random((N, N), dtype=np.float32)
    c = np.zeros((N, N), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from templtune import autotvm, te
from templtune.autotvm.tuner import RandomTuner

@autotvm.template("sigkill/matmul")
def mm(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    cfg = autotvm.get_config()
    y, x = s[C].op.axis
    cfg.define_split("ty", y, num_outputs=2)
    cfg.define_split("tx", x, num_outputs=2)
    cfg["ty"].apply(s, C, y)
    cfg["tx"].apply(s, C, x)
    return s, [A, B, C]

task = autotvm.task.create("sigkill/matmul", (16,), "llvm")
opt = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=2),
                             autotvm.LocalRunner(number=1, repeat=1, cooldown_interval=0.05))
tuner = RandomTuner(task, seed=4)
tuner.tune(n_trial=12, measure_option=opt, callbacks=[autotvm.callback.log_to_file(sys.argv[1])],
           resume_log=sys.argv[1])
print(json.dumps(tuner.tune_stats))
"""


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_sigkill_real_tuning_then_resume(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(root=root))
    log = tmp_path / "t.log"
    proc = subprocess.Popen([sys.executable, str(script), str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 4:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the tuning run finished before it could be killed"
    workers = _children(proc.pid)
    assert workers, "measurement workers should be running"
    proc.kill()
    proc.wait()
    for _ in range(100):  # workers must not outlive the tuning process
        if not any(_alive(w) for w in workers):
            break
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
    before = [inp.config.index for inp, _ in record.load_from_file(log)]
    assert 4 <= len(before) < 12 and len(set(before)) == len(before)
    out = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    recs = list(record.load_from_file(log))
    after = [inp.config.index for inp, _ in recs]
    assert after[: len(before)] == before
    assert len(after) == len(set(after)) == 12
    assert all(res.error_no == 0 for _, res in recs)


def test_workers_stay_warm_across_tune_calls():
    task = create("test_measure_local/matmul", (N, "float32"), "llvm")
    builder = LocalBuilder(n_parallel=1)
    runner = LocalRunner(number=1, repeat=1, cooldown_interval=0)
    opt = measure_option(builder, runner)
    try:
        GridSearchTuner(task).tune(n_trial=1, measure_option=opt)
        pids = (builder._pool._workers[0].proc.pid, runner._pool._workers[0].proc.pid)
        tuner = RandomTuner(task, seed=1)
        tuner.tune(n_trial=2, measure_option=opt)
        assert tuner.best_flops > 0
        assert (builder._pool._workers[0].proc.pid, runner._pool._workers[0].proc.pid) == pids
    finally:
        builder.close()
        runner.close()
    assert builder._pool is None and runner._pool is None
