"""Measurement cache of the sample-efficiency benchmark: configs measured once, shared by every
tuner and seed, kept in a JSON file; the exhaustive sweep (``--measure-all``) and the replay
runner (``--replay``) built on it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from templtune.autotvm.tuner.index_based import RandomTuner  # noqa: E402
from templtune.measure.fake import FakeBuilder, FakeRunner  # noqa: E402
from templtune.measure.measure import (  # noqa: E402
    Builder,
    BuildResult,
    MeasureErrorNo,
    MeasureResult,
    Runner,
    measure_option,
)


class Cache:
    """Measurements by config index (optionally loaded from / saved to a JSON file)."""

    def __init__(self, path: Path | None = None, key: str = "") -> None:
        self.results: dict[int, MeasureResult] = {}
        self.builds: dict[int, BuildResult] = {}
        self.path, self.key = path, key
        if path is not None and path.exists():
            stored = json.loads(path.read_text()).get(key, {})
            for i, (costs, err) in stored.items():
                self.results[int(i)] = MeasureResult(tuple(costs), MeasureErrorNo(err), 0.0, 0.0)
            print(f"  {len(self.results)} cached measurements loaded from {path}")

    def save(self) -> None:
        if self.path is None:
            return
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        data[self.key] = {str(i): [list(r.costs), int(r.error_no)]
                          for i, r in sorted(self.results.items())}
        # NOTE: write-then-rename: a run killed while saving keeps the previous file intact.
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)


class CachingBuilder(Builder):
    """Builds only configs never measured before (results are shared across tuners)."""

    def __init__(self, inner: Builder, cache: Cache) -> None:
        super().__init__(timeout=inner.timeout, n_parallel=inner.n_parallel)
        self.inner, self.cache = inner, cache

    def set_task(self, task: Any, build_kwargs: dict | None = None) -> None:
        self.inner.set_task(task, build_kwargs)

    def build(self, measure_inputs):
        todo = [m for m in measure_inputs if int(m.config.index) not in self.cache.results]
        built = self.inner.build(todo) if todo else []
        for m, b in zip(todo, built):
            self.cache.builds[int(m.config.index)] = b
        return [BuildResult(None, MeasureErrorNo.NO_ERROR, "", 0.0) for _ in measure_inputs]

    def close(self) -> None:
        self.inner.close()


class CachingRunner(Runner):
    def __init__(self, inner: Runner, cache: Cache, save_every: int = 50) -> None:
        super().__init__(timeout=inner.timeout, n_parallel=1)
        self.inner, self.cache = inner, cache
        self.n_measured = 0
        self.save_every = save_every

    def set_task(self, task: Any) -> Any:
        return self.inner.set_task(task)

    def get_build_kwargs(self) -> dict:
        return self.inner.get_build_kwargs()

    def run(self, measure_inputs, build_results):
        todo = [m for m in measure_inputs if int(m.config.index) not in self.cache.results]
        if todo:
            res = self.inner.run(todo, [self.cache.builds.pop(int(m.config.index)) for m in todo])
            before = self.n_measured
            self.n_measured += len(todo)
            for m, r in zip(todo, res):
                self.cache.results[int(m.config.index)] = r
            if self.n_measured // self.save_every > before // self.save_every:
                self.cache.save()  # NOTE: keeps long runs' measurements if they are cut short
        return [self.cache.results[int(m.config.index)] for m in measure_inputs]

    def close(self) -> None:
        self.inner.close()


class _MissingRunner(Runner):
    """The inner runner of ``--replay``: any config that reaches it is missing from the cache."""

    def __init__(self) -> None:
        super().__init__(timeout=1.0, n_parallel=1)

    def run(self, measure_inputs, build_results):
        missing = sorted(int(m.config.index) for m in measure_inputs)
        raise KeyError(f"--replay: configs {missing} are not in the measurement cache")


def make_option(a: argparse.Namespace, cache: Cache,
                 save_every: int = 50) -> tuple[dict, CachingBuilder, CachingRunner]:
    if getattr(a, "replay", False):
        inner_b: Builder = FakeBuilder(n_parallel=a.n_parallel)
        inner_r: Runner = _MissingRunner()
    elif a.fake:
        inner_b, inner_r = FakeBuilder(n_parallel=a.n_parallel), FakeRunner(seed=0)
    else:
        from templtune.measure.local_builder import LocalBuilder
        from templtune.measure.local_runner import LocalRunner

        inner_b = LocalBuilder(n_parallel=a.n_parallel)
        # NOTE: one timed run (after the correctness run): kernels take 5-1000 ms here and
        # the budget is thousands of distinct configs; configs slower than --timeout (both
        # runs; under ~5% of the best on an idle machine) count as failures, as in AutoTVM.
        inner_r = LocalRunner(number=1, repeat=1, min_repeat_ms=0, cooldown_interval=0,
                              timeout=a.timeout)
    builder = CachingBuilder(inner_b, cache)
    runner = CachingRunner(inner_r, cache, save_every=save_every)
    return measure_option(builder, runner), builder, runner


def measure_all(a: argparse.Namespace, label: str, task: Any, cache: Cache) -> dict[str, Any]:
    """Measure every valid config of ``task`` into ``cache`` (the ground-truth table).

    Configs already in the cache are skipped, and the cache is saved every 10 new measurements,
    so a killed run loses at most 10 and a rerun resumes where it stopped."""
    n = len(task.config_space)
    option, builder, runner = make_option(a, cache, save_every=10)
    tic = time.perf_counter()
    done0 = len(cache.results)

    def progress(t: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        got = len(cache.results)
        if got // 100 > (got - len(inputs)) // 100:
            el = time.perf_counter() - tic
            print(f"  {got}/{n} measured ({runner.n_measured} this run, {el:.0f} s, load "
                  f"{os.getloadavg()[0]:.2f})", flush=True)

    # NOTE: every valid index in a seeded random order (not index order: the machine's state
    # drifts over a long sweep, and neighbouring indices are similar configs, so index order
    # would turn drift into a bias against one region of the space); cached configs cost
    # nothing (the caching builder/runner skip them), so a rerun resumes the sweep.
    RandomTuner(task, seed=12345).tune(n_trial=n, measure_option=option, callbacks=[progress])
    builder.close()
    runner.close()
    cache.save()
    table = exhaustive_table(task, cache)
    print(f"{label}: {len(cache.results) - done0} measured in "
          f"{time.perf_counter() - tic:.0f} s; {table['n_ok']} of {table['n']} ran, best "
          f"{table['best_gflops']:.2f} GFLOPS (config {table['best_index']})", flush=True)
    return {"workload": label, "measure_all": table}


def exhaustive_table(task: Any, cache: Cache) -> dict[str, Any]:
    """GFLOPS of every cached config (0 for failures) and the table's summary."""
    gf = {i: (task.flop / r.mean_cost / 1e9 if r.ok else 0.0)
          for i, r in sorted(cache.results.items())}
    best_index = max(gf, key=gf.__getitem__) if gf else -1
    return {"n": len(gf), "n_ok": sum(1 for v in gf.values() if v > 0),
            "best_gflops": gf.get(best_index, 0.0), "best_index": best_index,
            "gflops": {str(i): v for i, v in gf.items()}}
