"""Tuners on real AutoTVM tasks (fake measurement): spec facts, callbacks, logs, kill + resume."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from templtune import te
from templtune.autotvm import record
from templtune.autotvm.callback import Monitor, log_to_file, progress_bar
from templtune.autotvm.measure import FakeBuilder, FakeRunner, ReplayRunner
from templtune.autotvm.task.task import create, get_config, template
from templtune.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner
from templtune.measure.measure import measure_option


def _gemm(N, L, M, dtype, filt):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    if filt:
        cfg.multi_filter(filter=lambda e: 32 <= e["tile_x"].size[1] * e["tile_y"].size[1] < 1024)
    return s, [A, B, C]


@template("test_tuner_resume/gemm")
def gemm(N, L, M, dtype):
    return _gemm(N, L, M, dtype, False)


@template("test_tuner_resume/gemm_filtered")
def gemm_filtered(N, L, M, dtype):
    return _gemm(N, L, M, dtype, True)


def _task(filtered=False):
    name = "test_tuner_resume/gemm_filtered" if filtered else "test_tuner_resume/gemm"
    return create(name, (128, 128, 128, "float32"), "llvm")


def _opt(n_parallel=4, seed=0):
    return measure_option(FakeBuilder(n_parallel=n_parallel), FakeRunner(seed=seed))


def test_space_facts_with_real_space():
    t = _task()
    assert t.config_space.range_length == 64
    g = GridSearchTuner(t)
    assert (g.index, g.visited_max) == (0, 64)
    tf = _task(True)
    assert len(tf.config_space) == 34
    g = GridSearchTuner(tf)
    assert (g.index, g.visited_max) == (5, 34)
    g = GridSearchTuner(tf, range_idx=(8, 15))
    assert (g.index, g.visited_max) == (12, 4)
    g.tune(n_trial=8, measure_option=_opt())
    assert sorted(g.visited) == [12, 13, 14, 15]


@pytest.mark.parametrize("cls", [RandomTuner, GridSearchTuner, GATuner])
@pytest.mark.parametrize("filtered", [False, True])
def test_tuners_on_real_space(cls, filtered):
    t = _task(filtered)
    opt = _opt()
    tuner = cls(t, seed=0)
    tuner.tune(n_trial=100, measure_option=opt)
    measured = opt["runner"].measured
    assert len(measured) == len(set(measured)) == len(t.config_space)
    assert all(t.config_space.is_index_valid(i) for i in measured)
    assert tuner.best_flops > 1


def test_log_to_file_and_reload(tmp_path):
    log = tmp_path / "gemm.log"
    t = _task()
    opt = _opt()
    mon = Monitor()
    RandomTuner(t, seed=0).tune(n_trial=10, measure_option=opt,
                                callbacks=[log_to_file(str(log)), mon])
    recs = list(record.load_from_file(log))
    assert [inp.config.index for inp, _ in recs] == opt["runner"].measured
    assert len(mon.trial_scores()) == 10 and all(mon.trial_scores() > 0)
    # a Path and a file object work too
    buf = io.StringIO()
    GridSearchTuner(t).tune(n_trial=3, measure_option=_opt(),
                            callbacks=[log_to_file(buf), log_to_file(tmp_path / "p.log")])
    assert len(buf.getvalue().splitlines()) == 3
    assert len((tmp_path / "p.log").read_text().splitlines()) == 3


def test_replay_runner_reproduces_log(tmp_path):
    log = tmp_path / "gemm.log"
    t = _task()
    first = RandomTuner(t, seed=1)
    first.tune(n_trial=64, measure_option=_opt(seed=5), callbacks=[log_to_file(str(log))])
    replay = measure_option(FakeBuilder(), ReplayRunner(str(log)))
    second = GATuner(t, pop_size=16, seed=2)
    second.tune(n_trial=64, measure_option=replay)
    assert second.best_config.index == first.best_config.index
    assert second.best_flops == pytest.approx(first.best_flops)


def test_progress_bar_output():
    out = io.StringIO()
    t = _task()
    RandomTuner(t, seed=0).tune(n_trial=12, measure_option=_opt(n_parallel=4),
                                callbacks=[progress_bar(12, prefix="[gemm]", file=out)])
    text = out.getvalue()
    assert "[gemm]" in text and "12/12" in text and "GFLOPS" in text and "errors: 0" in text


def test_resume_in_process(tmp_path):
    log = tmp_path / "r.log"
    t = _task()
    RandomTuner(t, seed=0).tune(n_trial=20, measure_option=_opt(),
                                callbacks=[log_to_file(str(log))])
    for cls in (RandomTuner, GridSearchTuner, GATuner):
        opt = _opt()
        tuner = cls(t, seed=3)
        tuner.tune(n_trial=30, measure_option=opt, resume_log=str(log))
        done = {inp.config.index for inp, _ in record.load_from_file(log)}
        assert len(opt["runner"].measured) == 10
        assert not (set(opt["runner"].measured) & done)
        assert tuner.best_config is not None


_CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {root!r})
    from templtune import te
    from templtune.autotvm.callback import log_to_file
    from templtune.measure.fake import FakeBuilder, FakeRunner, seeded_cost
    from templtune.measure.measure import measure_option
    from templtune.autotvm.task.task import create, get_config, template
    from templtune.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner

    @template("child/gemm")
    def gemm(N, L, M, dtype):
        A = te.placeholder((N, L), name="A", dtype=dtype)
        B = te.placeholder((L, M), name="B", dtype=dtype)
        k = te.reduce_axis((0, L), name="k")
        C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        y, x = s[C].op.axis
        cfg = get_config()
        cfg.define_split("tile_y", y, num_outputs=3)
        cfg.define_split("tile_x", x, num_outputs=3)
        return s, [A, B, C]

    cost = seeded_cost(0)
    def slow(i):
        time.sleep({delay})
        return cost(i)

    cls = {{"random": RandomTuner, "grid": GridSearchTuner, "ga": GATuner}}[sys.argv[1]]
    log = sys.argv[2]
    task = create("child/gemm", (64, 64, 64, "float32"), "llvm")
    runner = FakeRunner(cost_fn=slow)
    tuner = cls(task, seed=11)
    tuner.tune(n_trial=40, measure_option=measure_option(FakeBuilder(n_parallel=3), runner),
               callbacks=[log_to_file(log)], resume_log=log)
    print(json.dumps(runner.measured))
""")


@pytest.mark.parametrize("name", ["random", "grid", "ga"])
def test_sigkill_then_resume(tmp_path, name):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "child.py"
    log = tmp_path / "tune.log"
    script.write_text(_CHILD.format(root=root, delay=0.03))
    proc = subprocess.Popen([sys.executable, str(script), name, str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 12:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = list(record.load_from_file(log))
    assert 12 <= len(before) < 40
    done_before = [inp.config.index for inp, _ in before]
    assert len(done_before) == len(set(done_before))

    # resume with the very same command: finishes the budget of 40 without repeats
    script.write_text(_CHILD.format(root=root, delay=0.0))
    out = subprocess.run([sys.executable, str(script), name, str(log)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    measured_after = json.loads(out.stdout.strip().splitlines()[-1])
    assert not (set(measured_after) & set(done_before))
    after = list(record.load_from_file(log))
    indices = [inp.config.index for inp, _ in after]
    assert indices[: len(before)] == done_before  # no completed record lost
    assert len(indices) == len(set(indices)) == 40  # none measured twice, budget respected


def test_in_tuning_switch():
    from templtune.autotvm import env

    seen = []
    RandomTuner(_task(), seed=0).tune(
        n_trial=4, measure_option=_opt(n_parallel=2),
        callbacks=[lambda *a: seen.append(env.current().in_tuning)])
    assert seen == [True, True] and not env.current().in_tuning


def _tune_in_child(queue):
    out = {}
    for cls in (RandomTuner, GridSearchTuner, GATuner):
        tuner = cls(_task(), seed=0)
        tuner.tune(n_trial=10, measure_option=_opt())
        out[cls.__name__] = tuner.best_flops
    queue.put(out)


def test_tuners_in_spawned_process():
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_tune_in_child, args=(queue,))
    proc.start()
    out = queue.get(timeout=120)
    proc.join(30)
    assert proc.exitcode == 0
    assert set(out) == {"RandomTuner", "GridSearchTuner", "GATuner"}
    assert all(v > 1 for v in out.values())


def test_resume_keeps_early_stopping_position(tmp_path):
    log = tmp_path / "es.log"
    t = _task()
    RandomTuner(t, seed=0).tune(n_trial=20, measure_option=_opt(),
                                callbacks=[log_to_file(str(log))])
    recs = list(record.load_from_file(log))
    best_pos = min(range(20), key=lambda j: recs[j][1].mean_cost)
    slow = measure_option(FakeBuilder(n_parallel=4), FakeRunner(cost_fn=lambda i: 1.0))
    tuner = RandomTuner(t, seed=1)
    tuner.tune(n_trial=64, measure_option=slow, early_stopping=10, resume_log=str(log))
    assert tuner.best_iter == best_pos
    assert tuner.best_config.index == recs[best_pos][0].config.index
    expected = 20 + 4
    while expected < best_pos + 10:
        expected += 4
    assert tuner.tune_stats["resumed"] == 20
    assert tuner.tune_stats["trials"] == expected - 20


def test_progress_bar_silent_at_debug_and_bad_protocol():
    import logging

    out = io.StringIO()
    log = logging.getLogger("templtune.tuner")
    old = log.level
    log.setLevel(logging.DEBUG)
    try:
        RandomTuner(_task(), seed=0).tune(n_trial=4, measure_option=_opt(),
                                          callbacks=[progress_bar(4, file=out)])
    finally:
        log.setLevel(old)
    assert out.getvalue() == ""
    with pytest.raises(ValueError):
        log_to_file("x.log", protocol="pickle")
