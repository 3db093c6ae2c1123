"""Tuner loops on a fake space and a fake runner: deterministic, fast, no compiler involved."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune import te
from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, measure_option
from templtune.autotvm.task.task import create, get_config, template
from templtune.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner
from templtune.autotvm.tuner.registry import load_tuners
from templtune.measure.fake import FakeBuilder, FakeRunner, seeded_cost


@dataclass(frozen=True)
class FakeConfig:
    index: int
    knobs: tuple

    @property
    def _entity_map(self) -> dict:  # what a record's config is compared by
        return {f"k{j}": v for j, v in enumerate(self.knobs)}


class FakeSpace:
    """Mixed-radix index space with the spec's API (first knob least significant)."""

    def __init__(self, dims, valid=None):
        self.dims = list(dims)
        self.range_length = int(np.prod(self.dims))
        self._valid = valid
        self._len = sum(1 for i in range(self.range_length) if self.is_index_valid(i))

    def __len__(self):
        return self._len

    def is_index_valid(self, i):
        assert 0 <= i < self.range_length
        return True if self._valid is None else bool(self._valid(self.point2knob(i)))

    def subrange_length(self, s, e):
        return sum(1 for i in range(s, e) if self.is_index_valid(i))

    def point2knob(self, p):
        out = []
        for d in self.dims:
            out.append(p % d)
            p //= d
        return out

    def knob2point(self, k):
        p, m = 0, 1
        for v, d in zip(k, self.dims):
            p += v * m
            m *= d
        return p

    def get(self, i):
        if not (0 <= i < self.range_length) or not self.is_index_valid(i):
            raise IndexError(i)
        return FakeConfig(i, tuple(self.point2knob(i)))


@dataclass
class FakeTask:
    config_space: FakeSpace
    name: str = "fake/matmul"
    args: tuple = (128, 128, 128, "float32")
    target: str = "llvm"
    flop: float = 2 * 128**3
    extra: dict = field(default_factory=dict)


def multi_filter(k):  # 32 <= tile_y * tile_x < 1024 with tiles 2**k
    return 5 <= k[0] + k[1] <= 9


def make_task(valid=None, dims=(8, 8)):
    return FakeTask(FakeSpace(dims, valid))


def option(n_parallel=4, seed=0, **kw):
    return measure_option(FakeBuilder(n_parallel=n_parallel), FakeRunner(seed=seed, **kw))


# NOTE: every registered tuner that needs no template features runs on the fake space, so a
# tuner added to templtune/autotvm/tuner/ is tested here without editing this file.
# GA gets a small population so that the 64-config space sees several generations.
_SMALL_SPACE_OPTIONS: dict[type, dict] = {GATuner: {"pop_size": 16}}
TUNERS = {name: functools.partial(info.create, **_SMALL_SPACE_OPTIONS.get(info.cls, {}))
          for name, info in load_tuners().items() if not info.needs_features}
# Tuners that cover the whole space when the budget allows (local searches stop earlier).
EXHAUSTIVE = sorted(n for n in TUNERS if load_tuners()[n].exhaustive)


@pytest.mark.parametrize("name", EXHAUSTIVE)
@pytest.mark.parametrize("valid", [None, multi_filter])
def test_full_loop_no_repeats_and_valid(name, valid):
    task = make_task(valid)
    opt = option()
    tuner = TUNERS[name](task, seed=1)
    tuner.tune(n_trial=1000, measure_option=opt)
    measured = opt["runner"].measured
    assert len(measured) == len(set(measured)) == len(task.config_space)
    assert all(task.config_space.is_index_valid(i) for i in measured)
    assert not tuner.has_next()
    cost = seeded_cost(0)
    best = min(measured, key=cost)
    assert tuner.best_config.index == best
    assert tuner.best_flops == pytest.approx(task.flop / cost(best))


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_budget_and_determinism(name):
    runs = []
    for _ in range(2):
        opt = option(n_parallel=3)
        tuner = TUNERS[name](make_task(), seed=7)
        tuner.tune(n_trial=10, measure_option=opt)
        runs.append(list(opt["runner"].measured))
        assert tuner.best_flops > 1
    assert len(runs[0]) == 10
    assert runs[0] == runs[1]


def test_different_seeds_differ():
    seqs = []
    for seed in (1, 2):
        opt = option()
        RandomTuner(make_task(), seed=seed).tune(n_trial=20, measure_option=opt)
        seqs.append(opt["runner"].measured)
    assert seqs[0] != seqs[1]


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_early_stopping(name):
    # cost decreasing in index for grid would never stop; use a cost minimal at a early trial
    opt = measure_option(FakeBuilder(n_parallel=2), FakeRunner(cost_fn=lambda i: 1.0))
    tuner = TUNERS[name](make_task(), seed=0)
    tuner.tune(n_trial=64, measure_option=opt, early_stopping=6)
    # the first measured config is the best (ties never replace it): stop after >= 6 trials
    assert tuner.best_iter == 0
    assert 6 <= len(opt["runner"].measured) <= 7


def test_grid_range_idx_facts():
    t = GridSearchTuner(make_task())
    assert (t.begin_idx, t.end_idx, t.index, t.range_length, t.visited_max) == (0, 64, 0, 64, 64)
    t = GridSearchTuner(make_task(), range_idx=(8, 15))
    assert (t.begin_idx, t.end_idx, t.index, t.range_length, t.visited_max) == (8, 16, 8, 8, 8)
    t.tune(n_trial=8, measure_option=option())
    assert len(t.visited) == 8 and not t.has_next()
    t = GridSearchTuner(make_task(multi_filter))
    assert (t.index, t.visited_max) == (5, 34)
    t = GridSearchTuner(make_task(multi_filter), range_idx=(8, 15))
    assert (t.index, t.visited_max) == (12, 4)
    t.tune(n_trial=8, measure_option=option())
    assert sorted(t.visited) == [12, 13, 14, 15]


@pytest.mark.parametrize("valid,expect", [(None, set(range(8, 16))),
                                          (multi_filter, {12, 13, 14, 15})])
def test_random_range_idx(valid, expect):
    opt = option()
    t = RandomTuner(make_task(valid), range_idx=(8, 15), seed=3)
    t.tune(n_trial=100, measure_option=opt)
    assert set(opt["runner"].measured) == expect and len(opt["runner"].measured) == len(expect)
    assert not t.has_next()


def test_bad_range_idx():
    with pytest.raises(ValueError):
        RandomTuner(make_task(), range_idx=(0, 64))
    with pytest.raises(ValueError):
        GridSearchTuner(make_task(), range_idx=(-1, 3))


@pytest.mark.parametrize("pop", [32, 100])
@pytest.mark.parametrize("valid", [None, lambda k: 3 <= k[0] + k[1] <= 9])
def test_ga_population_facts(pop, valid):
    task = make_task(valid)
    t = GATuner(task, pop_size=pop, seed=0)
    assert t.pop_size == len(t.visited) == len(t.genes) == min(pop, len(task.config_space))
    assert all(task.config_space.is_index_valid(i) for i in t.visited)
    t.tune(n_trial=len(task.config_space), measure_option=option())
    assert all(task.config_space.is_index_valid(i) for i in t.visited)


def test_ga_elite_check():
    with pytest.raises(ValueError):
        GATuner(make_task(), pop_size=2, elite_num=3)


def test_ga_finds_good_configs_on_large_space():
    # a smooth cost over a 4-knob space of 4096 points: GA beats its first generation
    dims = (8, 8, 8, 8)

    def cost(i):
        k = FakeSpace(dims).point2knob(i)
        return 1e-3 * (1 + sum((v - 5) ** 2 for v in k))

    task = make_task(dims=dims)
    opt = measure_option(FakeBuilder(n_parallel=8), FakeRunner(cost_fn=cost))
    t = GATuner(task, pop_size=32, seed=0)
    t.tune(n_trial=256, measure_option=opt)
    measured = opt["runner"].measured
    assert len(measured) == 256 == len(set(measured))
    first_gen_best = min(cost(i) for i in measured[:32])
    assert min(cost(i) for i in measured) < first_gen_best


def test_errors_are_counted_not_best():
    def err(i):
        return MeasureErrorNo.RUNTIME_DEVICE if i % 2 == 0 else None

    opt = measure_option(FakeBuilder(n_parallel=4), FakeRunner(seed=0, error_fn=err))
    t = RandomTuner(make_task(), seed=0)
    seen = []
    t.tune(n_trial=20, measure_option=opt,
           callbacks=[lambda tu, inps, ress: seen.extend(zip(inps, ress))])
    assert len(seen) == 20
    assert t.best_config.index % 2 == 1
    for inp, res in seen:
        assert isinstance(inp, MeasureInput)
        assert (res.error_no == MeasureErrorNo.RUNTIME_DEVICE) == (inp.config.index % 2 == 0)


@template("test_tuner_fake/vadd", override=True)  # test_tuner_registry re-imports this file
def _vadd(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    get_config().define_split("t", B.op.axis[0], num_outputs=2)
    return s, [A, B]


def _real_task():
    """A real template's task (records of it can be written to a log)."""
    return create("test_tuner_fake/vadd", (64,), "llvm")


@pytest.mark.parametrize("with_log", [False, True])
def test_all_errors_reported_without_stray_temp_files(tmp_path, monkeypatch, caplog, with_log):
    """An all-failed run leaves nothing in the temp directory: the first error is in the
    warning, and the full list beside the user's record log when there is one."""
    from templtune.autotvm.callback import log_to_file

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    opt = measure_option(FakeBuilder(), FakeRunner(error_fn=lambda i: MeasureErrorNo.COMPILE_HOST))
    log = tmp_path / "t.log"
    t = GridSearchTuner(_real_task())
    with caplog.at_level("WARNING", logger="autotvm"):
        t.tune(n_trial=5, measure_option=opt,
               callbacks=[log_to_file(str(log))] if with_log else [])
    assert t.best_config is None and t.best_flops == 0
    assert list(tmp.iterdir()) == []
    assert "every trial failed" in caplog.text and "fake error for config 0" in caplog.text
    errors = tmp_path / "t.log.errors.txt"
    assert errors.exists() == with_log
    if with_log:
        assert str(errors) in caplog.text
        assert errors.read_text().count("fake error") == 5


def test_update_before_callbacks():
    order = []

    class Spy(RandomTuner):
        def update(self, inputs, results):
            order.append("update")

    Spy(make_task(), seed=0).tune(4, option(n_parallel=2),
                                  callbacks=[lambda *a: order.append("cb")])
    assert order == ["update", "cb", "update", "cb"]


def test_si_prefix_validation():
    with pytest.raises(ValueError):
        RandomTuner(make_task()).tune(2, option(), si_prefix="X")


def test_load_history_marks_visited():
    task = make_task()
    prev = [(MeasureInput("llvm", task, task.config_space.get(i)),
             FakeRunner(seed=0).run([MeasureInput("llvm", task, task.config_space.get(i))],
                                    FakeBuilder().build([None]))[0])
            for i in range(0, 64, 2)]
    for name in EXHAUSTIVE:
        opt = option()
        t = TUNERS[name](task, seed=0)
        t.load_history(prev)
        assert t.best_config is not None
        t.tune(n_trial=100, measure_option=opt)
        assert sorted(opt["runner"].measured) == list(range(1, 64, 2))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), n_trial=st.integers(1, 70), n_par=st.integers(1, 9),
       name=st.sampled_from(EXHAUSTIVE), filtered=st.booleans())
def test_property_budget_no_repeat(seed, n_trial, n_par, name, filtered):
    task = make_task(multi_filter if filtered else None)
    opt = option(n_parallel=n_par, seed=seed)
    TUNERS[name](task, seed=seed).tune(n_trial=n_trial, measure_option=opt)
    measured = opt["runner"].measured
    assert len(measured) == min(n_trial, len(task.config_space))
    assert len(set(measured)) == len(measured)
    assert all(task.config_space.is_index_valid(i) for i in measured)


def test_unknown_kwargs_rejected():
    with pytest.raises(TypeError, match="pop_sise"):
        GATuner(make_task(), pop_sise=4)
    with pytest.raises(TypeError):
        RandomTuner(make_task(), rang_idx=(0, 3))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), n_trial=st.integers(1, 70), n_par=st.integers(1, 9),
       name=st.sampled_from(sorted(TUNERS)), filtered=st.booleans())
def test_property_every_tuner_respects_budget_and_filters(seed, n_trial, n_par, name, filtered):
    task = make_task(multi_filter if filtered else None)
    opt = option(n_parallel=n_par, seed=seed)
    tuner = TUNERS[name](task, seed=seed)
    tuner.tune(n_trial=n_trial, measure_option=opt)
    measured = opt["runner"].measured
    assert 1 <= len(measured) <= n_trial
    assert len(set(measured)) == len(measured)
    assert all(task.config_space.is_index_valid(i) for i in measured)
    if len(measured) < min(n_trial, len(task.config_space)):
        assert not tuner.has_next()  # stopped because it converged, not silently


def test_droplet_walks_downhill_to_the_optimum():
    from templtune.autotvm.tuner.droplet_tuner import DropletTuner

    space = FakeSpace((8, 8))
    target = space.knob2point([5, 3])

    def cost(i):
        k = space.point2knob(i)
        return 1.0 + abs(k[0] - 5) + abs(k[1] - 3)

    opt = measure_option(FakeBuilder(n_parallel=4), FakeRunner(cost_fn=cost))
    tuner = DropletTuner(make_task(), seed=0)
    tuner.tune(n_trial=64, measure_option=opt)
    assert tuner.best_config.index == target
    assert not tuner.has_next()
    assert len(opt["runner"].measured) < 40  # a local search, not a sweep of all 64


def test_droplet_start_position_and_validation():
    from templtune.autotvm.tuner.droplet_tuner import DropletTuner

    t = DropletTuner(make_task(), start_position=[2, 1])
    assert [c.index for c in t.next_batch(4)] == [FakeSpace((8, 8)).knob2point([2, 1])]
    with pytest.raises(ValueError, match="knob vector"):
        DropletTuner(make_task(), start_position=[9, 0])
    # a filtered-out start moves to a valid config
    t = DropletTuner(make_task(multi_filter), seed=0)
    assert make_task(multi_filter).config_space.is_index_valid(t.center)


def test_droplet_significance_needs_repeats_to_disagree():
    from templtune.autotvm.tuner.droplet_tuner import significantly_faster

    assert significantly_faster([0.5, 0.51, 0.49], [1.0, 1.02, 0.98], 0.05)
    assert not significantly_faster([0.99, 1.03, 0.97], [1.0, 1.02, 0.98], 0.05)
    assert significantly_faster([0.9], [1.0], 0.05)  # single timings: the lower mean wins
    assert not significantly_faster([1.1], [1.0], 0.05)


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_initial_configs_are_measured_first_and_once(name, caplog):
    task = make_task()
    space = task.config_space
    opt = option(n_parallel=4)
    tuner = TUNERS[name](task, seed=3)
    # NOTE: two configs the tuner has not planned (GA plans its first generation up front)
    a, b = [i for i in range(len(space)) if i not in tuner.visited][-2:]
    stray = FakeConfig(9, (0, 0))  # its index names another point
    tuner.tune(n_trial=10, measure_option=opt,
               initial_configs=[space.get(b), space.get(a), space.get(b), stray])
    measured = opt["runner"].measured
    assert measured[:2] == [b, a]
    assert len(measured) == len(set(measured)) == 10
    assert "initial config #9" in caplog.text
