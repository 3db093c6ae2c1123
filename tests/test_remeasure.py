"""remeasure_best: each task's fastest logged configs measured again into a second log."""

from __future__ import annotations

import time

import pytest

from templtune import autotvm
from templtune.autotvm import record
from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from templtune.autotvm.strategy import load_templates
from templtune.autotvm.tuner.remeasure import remeasure_best
from templtune.target import Target


def _log(path, task, costs: dict[int, float]) -> None:
    with open(path, "a") as f:
        for idx, cost in costs.items():
            res = (MeasureResult((cost,), MeasureErrorNo.NO_ERROR, cost, time.time())
                   if cost else MeasureResult((1e9,), MeasureErrorNo.RUNTIME_DEVICE, 0.0,
                                              time.time()))
            f.write(record.encode(MeasureInput(Target("llvm"), task, task.config_space.get(idx)),
                                  res) + "\n")


def test_the_fastest_configs_are_measured_again(tmp_path):
    load_templates()
    task = autotvm.task.create("dense", (2, 16, 32), "llvm")
    other = autotvm.task.create("dense", (2, 8, 32), "llvm")
    valid = [i for i in range(task.config_space.range_length)
             if task.config_space.is_index_valid(i)]
    a, b, c, d = valid[:4]
    log, out = tmp_path / "t.log", tmp_path / "t.best.log"
    # the logged costs rank a, b, then c; d failed; another task's record is left alone
    _log(log, task, {c: 3e-3, a: 1e-3, b: 2e-3, d: 0.0})
    first = next(i for i in range(other.config_space.range_length)
                 if other.config_space.is_index_valid(i))
    _log(log, other, {first: 1e-4})
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=2, repeat=3))
    try:
        n = remeasure_best([task], log, out, option, top=2)
    finally:
        for part in option.values():
            part.close()
    got = list(record.load_from_file(str(out)))
    assert n == 2 and sorted(inp.config.index for inp, _ in got) == sorted([a, b])
    # new measurements, not the logged costs
    assert all(res.error_no == MeasureErrorNo.NO_ERROR and res.mean_cost not in (1e-3, 2e-3)
               for _, res in got)
    assert len(list(record.load_from_file(str(log)))) == 5  # the tuning log is unchanged
    # a logged config whose index now names another point is not measured under that index
    stale = tmp_path / "stale.log"
    line = record.encode(MeasureInput(Target("llvm"), task, task.config_space.get(a)),
                         MeasureResult((1e-6,), MeasureErrorNo.NO_ERROR, 0.0, time.time()))
    stale.write_text(line.replace(f'"index": {a}', f'"index": {b}') + "\n")
    assert remeasure_best([task], stale, out, option, top=2) == 0
    with pytest.raises(ValueError, match="top"):
        remeasure_best([task], log, out, option, top=0)


def test_keep_limits_the_candidates_and_same_blocking_keeps_the_packaged_blocks(tmp_path):
    from templtune.cli.tune_network_cmd import same_blocking

    load_templates()
    args = (1, 8, 8, 32, 32, 3, 3, 1, 1)
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    space = task.config_space
    by_block: dict[tuple[int, int], list[int]] = {}
    for i in range(space.range_length):
        if space.is_index_valid(i):
            cfg = space.get(i)
            by_block.setdefault((cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]), []).append(i)
    (b16, *_), (b8, *_) = by_block[(16, 16)], by_block[(8, 16)]
    log, out = tmp_path / "t.log", tmp_path / "t.best.log"
    _log(log, task, {b8: 1e-4, b16: 2e-4})  # the 8/16 config looks faster alone
    keep = same_blocking({task.workload: [space.get(by_block[(16, 16)][-1])]})
    assert keep(task, space.get(b16)) and not keep(task, space.get(b8))
    # a task without a packaged record, or one whose record has no blocks: any config
    assert same_blocking({})(task, space.get(b8))
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=1, repeat=1))
    try:
        assert remeasure_best([task], log, out, option, top=4, keep=keep) == 1
    finally:
        for part in option.values():
            part.close()
    assert [inp.config.index for inp, _ in record.load_from_file(str(out))] == [b16]


def test_a_task_whose_configs_all_fail_again_keeps_its_logged_best(tmp_path, monkeypatch):
    from templtune.autotvm.tuner import remeasure

    load_templates()
    task = autotvm.task.create("dense", (2, 16, 32), "llvm")
    valid = [i for i in range(task.config_space.range_length)
             if task.config_space.is_index_valid(i)]
    log, out = tmp_path / "t.log", tmp_path / "t.best.log"
    _log(log, task, {valid[0]: 2e-3, valid[1]: 1e-3})

    def failing(task, option):
        return lambda inputs: [MeasureResult((1e9,), MeasureErrorNo.RUN_TIMEOUT, 0.0,
                                             time.time()) for _ in inputs]

    monkeypatch.setattr(remeasure, "create_measure_batch", failing)
    assert remeasure_best([task], log, out, {}, top=2) == 1
    (inp, res), = record.load_from_file(str(out))
    assert inp.config.index == valid[1] and res.mean_cost == pytest.approx(1e-3)
