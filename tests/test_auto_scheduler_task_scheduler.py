"""auto_scheduler TaskScheduler: round-robin, gradient allocation, resume from a log."""

from __future__ import annotations

import hashlib
import time

from templtune import auto_scheduler as auto
from templtune import te
from templtune.auto_scheduler.measure import BuildResult, MeasureResult
from templtune.auto_scheduler.search_policy import state_key


@auto.register_workload("test_as_ts_matmul", override=True)
def matmul(n: int, m: int, k: int) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    return [a, b, te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")]


class FakeBuilder:
    n_parallel = 1

    def build(self, inputs, verbose=1):
        return [BuildResult(b"", 0, "", 0.0) for _ in inputs]

    def close(self):
        pass


class FakeRunner:
    def run(self, inputs, build_results, verbose=1):
        out = []
        for inp in inputs:
            h = int(hashlib.md5(state_key(inp.state).encode()).hexdigest()[:6], 16)
            out.append(MeasureResult((1e-3 * (1 + h % 100) / 100,), 0, "", 0.0, time.time()))
        return out

    def close(self):
        pass


def _tasks() -> list:
    return [auto.SearchTask(func=matmul, args=(n, n, n), target="llvm") for n in (8, 16, 32)]


def _opt(trials: int, log: str) -> auto.TuningOptions:
    return auto.TuningOptions(num_measure_trials=trials, num_measures_per_round=1, verbose=0,
                              builder=FakeBuilder(), runner=FakeRunner(),
                              measure_callbacks=[auto.RecordToFile(log)])


def _per_task(log: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for inp, _ in auto.RecordReader(log):
        out[inp.task.workload_key] = out.get(inp.task.workload_key, 0) + 1
    return out


PARAMS = {"evolutionary_search_population": 8, "sample_init_min_population": 8}


def test_round_robin_and_resume(tmp_path) -> None:
    log = str(tmp_path / "log.json")
    tasks = _tasks()
    ts = auto.TaskScheduler(tasks, strategy="round-robin", callbacks=[])
    ts.tune(_opt(6, log), search_policy="sketch.random", search_policy_params=PARAMS)
    assert sorted(_per_task(log).values()) == [2, 2, 2]
    ts2 = auto.TaskScheduler(tasks, strategy="round-robin", load_log_file=log, callbacks=[])
    ts2.tune(_opt(6, log), search_policy="sketch.random", search_policy_params=PARAMS)
    assert ts2.task_cts[0] >= 2
    recs = list(auto.RecordReader(log))
    assert len(recs) == 12
    keys = [state_key(i.state) + i.task.workload_key for i, _ in recs]
    assert len(set(keys)) == len(keys)


def test_gradient_prefers_the_task_in_the_objective(tmp_path, capsys) -> None:
    log = str(tmp_path / "log.json")
    tasks = _tasks()[:2]
    lat = str(tmp_path / "lat.tsv")
    ts = auto.TaskScheduler(tasks, objective_func=lambda c: 1e5 * c[0],
                            callbacks=[auto.PrintTableInfo(), auto.LogEstimatedLatency(lat)])
    opt = _opt(5, log)
    opt.verbose = 1
    ts.tune(opt, search_policy="sketch.random", search_policy_params=PARAMS)
    counts = _per_task(log)
    assert counts[tasks[0].workload_key] == 4 and counts[tasks[1].workload_key] == 1
    assert "Estimated total latency" in capsys.readouterr().out
    assert open(lat).read().startswith("ElapsedTime(s)")
