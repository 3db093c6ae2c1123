"""auto_scheduler: search loop, measurement, resume, records, cost models, CLI distill."""

from __future__ import annotations

import hashlib
import json
import time

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler as auto
from templtune import te
from templtune.auto_scheduler.measure import BuildResult, MeasureResult
from templtune.auto_scheduler.search_policy import state_key


@auto.register_workload("test_as_search_matmul_relu", override=True)
def matmul_relu(n: int, m: int, k: int) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((n, m), lambda i, j: te.max(c[i, j], 0.0), name="D")
    return [a, b, d]


class FakeBuilder:
    n_parallel = 2

    def build(self, inputs, verbose=1):
        return [BuildResult(b"", 0, "", 0.0) for _ in inputs]

    def close(self):
        pass


class FakeRunner:
    """Deterministic cost from the state's steps."""

    def __init__(self):
        self.measured: list[str] = []

    def run(self, inputs, build_results, verbose=1):
        out = []
        for inp in inputs:
            k = state_key(inp.state)
            self.measured.append(k)
            h = int(hashlib.md5(k.encode()).hexdigest()[:8], 16)
            out.append(MeasureResult((1e-3 * (1 + h % 1000) / 1000,), 0, "", 0.01, time.time()))
        return out

    def close(self):
        pass


def _task(n: int = 32) -> auto.SearchTask:
    return auto.SearchTask(func=matmul_relu, args=(n, n, n), target="llvm")


def test_random_search_and_resume_does_not_remeasure(tmp_path) -> None:
    log = str(tmp_path / "log.json")
    task = _task()
    runner = FakeRunner()
    opt = auto.TuningOptions(num_measure_trials=12, num_measures_per_round=4, verbose=0,
                             builder=FakeBuilder(), runner=runner,
                             measure_callbacks=[auto.RecordToFile(log)])
    pol = auto.SketchPolicy(task, seed=0, verbose=0,
                            params={"evolutionary_search_population": 32})
    best = task.tune(opt, search_policy=pol)
    assert best is not None
    assert len(runner.measured) == 12 and len(set(runner.measured)) == 12
    recs = list(auto.RecordReader(log))
    assert len(recs) == 12
    # resume: preloaded states are never measured again
    runner2 = FakeRunner()
    pol2 = auto.SketchPolicy(task, seed=1, verbose=0,
                             params={"evolutionary_search_population": 32},
                             init_search_callbacks=[auto.PreloadMeasuredStates(log)])
    assert set(runner.measured) <= pol2.measured_keys
    assert len(pol2.measured_states) == 12
    opt2 = auto.TuningOptions(num_measure_trials=8, num_measures_per_round=4, verbose=0,
                              builder=FakeBuilder(), runner=runner2,
                              measure_callbacks=[auto.RecordToFile(log)])
    task.tune(opt2, search_policy=pol2)
    assert len(runner2.measured) == 8
    assert not set(runner2.measured) & set(runner.measured)
    assert len(list(auto.RecordReader(log))) == 20


def test_search_without_measurement_and_empty_policy() -> None:
    task = _task(16)
    pol = auto.SketchPolicy(task, seed=0, verbose=0, params={"evolutionary_search_population": 16})
    opt = auto.TuningOptions(num_measure_trials=0, verbose=0, builder=FakeBuilder(),
                             runner=FakeRunner())
    state = task.tune(opt, search_policy=pol)
    assert state is not None and state.transform_steps
    runner = FakeRunner()
    opt = auto.TuningOptions(num_measure_trials=2, verbose=0, builder=FakeBuilder(),
                             runner=runner)
    task.tune(opt, search_policy=auto.EmptyPolicy(task))
    assert len(runner.measured) == 2


def test_early_stopping() -> None:
    task = _task()

    class Constant(FakeRunner):
        def run(self, inputs, build_results, verbose=1):
            self.measured += [state_key(i.state) for i in inputs]
            return [MeasureResult((1e-3,), 0, "", 0.0, 0.0) for _ in inputs]

    runner = Constant()
    opt = auto.TuningOptions(num_measure_trials=40, num_measures_per_round=2, early_stopping=3,
                             verbose=0, builder=FakeBuilder(), runner=runner)
    pol = auto.SketchPolicy(task, seed=0, verbose=0, params={"evolutionary_search_population": 16})
    task.tune(opt, search_policy=pol)
    assert len(runner.measured) < 40


def test_real_measurement_end_to_end(tmp_path, capsys) -> None:
    log = str(tmp_path / "mm.json")
    task = _task(32)
    opt = auto.TuningOptions(num_measure_trials=6, num_measures_per_round=3,
                             builder=auto.LocalBuilder(n_parallel=2),
                             runner=auto.LocalRunner(min_repeat_ms=0, number=2),
                             measure_callbacks=[auto.RecordToFile(log)])
    pol = auto.SketchPolicy(task, seed=2, params={"evolutionary_search_population": 16})
    task.tune(opt, search_policy=pol)
    out = capsys.readouterr().out
    assert "*" in out
    recs = list(auto.RecordReader(log))
    assert len(recs) == 6
    assert any(r.error_no == 0 for _, r in recs)
    sch, args = task.apply_best(log)
    mod = templtune.build(sch, args, target="llvm")
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (32, 32)).astype("float32") for _ in range(2))
    d = np.zeros((32, 32), "float32")
    mod(a, b, d)
    np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    code = task.print_best(log)
    assert "s[" in code
    hist = auto.ApplyHistoryBest(log)
    assert hist.query("llvm", task.workload_key) is not None
    assert hist.query("cuda", task.workload_key) is None
    # CLI distill
    from templtune.cli.main import main

    assert main(["auto-scheduler", "distill", log]) == 0
    best = list(auto.RecordReader(log + ".best.json"))
    assert len(best) == 1
    # `templtune log distill` recognises auto_scheduler logs too
    out2 = str(tmp_path / "distilled.json")
    assert main(["log", "distill", log, "-o", out2]) == 0
    assert [r.mean_cost for _, r in auto.RecordReader(out2)] == [best[0][1].mean_cost]


def test_xgb_model_fits_and_roundtrips(tmp_path) -> None:
    task = _task(32)
    pol = auto.SketchPolicy(task, seed=0, verbose=0)
    states = pol.sample_initial_population(50)
    rng = np.random.default_rng(0)
    costs = rng.uniform(0.5, 1.0, len(states))
    inputs = [auto.MeasureInput(task, s) for s in states]
    results = [MeasureResult((float(c),), 0, "", 0.0, 0.0) for c in costs]
    model = auto.XGBModel(num_warmup_sample=-1, seed=0)
    model.update(inputs, results)
    pred = model.predict(task, states)
    y = costs.min() / costs
    assert float(np.sqrt(np.mean((pred - y) ** 2))) <= 0.3
    f = str(tmp_path / "m.bin")
    model.save(f)
    m2 = auto.XGBModel()
    m2.load(f)
    np.testing.assert_allclose(m2.predict(task, states), pred, rtol=1e-5)
    log = str(tmp_path / "log.json")
    auto.save_records(log, inputs, results)
    m3 = auto.XGBModel(num_warmup_sample=-1)
    m3.update_from_file(log)
    assert len(m3.xs) == len(states) and m3.bst is not None
    # an XGB-guided round of search runs
    pol2 = auto.SketchPolicy(task, m3, seed=0, verbose=0,
                             params={"evolutionary_search_population": 16})
    opt = auto.TuningOptions(num_measure_trials=4, num_measures_per_round=2, verbose=0,
                             builder=FakeBuilder(), runner=FakeRunner())
    assert task.tune(opt, search_policy=pol2) is not None


def test_tuning_options_and_errors(tmp_path) -> None:
    with pytest.raises(ValueError):
        auto.TuningOptions(builder="rpc")
    with pytest.raises(ValueError):
        auto.SearchTask(func=matmul_relu, args=(8, 8, 8))
    task = _task(8)
    with pytest.raises(RuntimeError, match="cannot find"):
        task.apply_best(str(tmp_path / "missing.json"))
    ctx = auto.LocalRPCMeasureContext(min_repeat_ms=0)
    assert ctx.runner is not None
    assert json.loads(task.workload_key)[0] == "test_as_search_matmul_relu"
