"""``logs/rerank.py --block``: the candidates of a ``conv2d_NCHWc`` workload are exactly the
space's points with the requested channel blocks (any input block where it does not divide)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from templtune import autotvm
from templtune.autotvm.measure import MeasureInput
from templtune.autotvm.strategy import load_templates

RERANK = Path(__file__).resolve().parents[1] / "logs" / "rerank.py"


def _rerank():
    spec = importlib.util.spec_from_file_location("rerank", RERANK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _blocks(cfg) -> tuple[int, int]:
    return cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]


@pytest.mark.parametrize("args, ic_any", [((1, 14, 14, 64, 64, 3, 3, 1, 1), False),
                                          ((1, 16, 16, 32, 3, 3, 3, 2, 1), True)])
def test_block_candidates_are_the_spaces_uniform_points(args, ic_any):
    load_templates()
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    space = task.config_space
    seed = MeasureInput("llvm", task, space.get(next(i for i in range(space.range_length)
                                                     if space.is_index_valid(i))))
    got = _rerank().block_candidates(seed, 32)
    want = {i for i in range(space.range_length) if space.is_index_valid(i)
            and _blocks(space.get(i))[1] == 32 and (ic_any or _blocks(space.get(i))[0] == 32)}
    assert {c.config.index for c in got} == want and want
    assert all(_blocks(c.config)[1] == 32 for c in got)
    if ic_any:
        assert {_blocks(c.config)[0] for c in got} == {1, 3}


def test_grouped_workloads_are_reranked_at_the_block_too(tmp_path):
    """A grouped conv's raw log (ResNeXt's groups of 4) re-ranks over the grouped space's
    points with 32-channel blocks in and out, as a plain conv's does."""
    from templtune.autotvm.record import encode
    from templtune.measure.measure import MeasureErrorNo, MeasureResult

    load_templates()
    rr = _rerank()
    name, args = "group_conv2d_NCHWc.x86", (1, 14, 14, 128, 128, 3, 3, 1, 1, 32)
    assert name in rr.BLOCKED
    task = autotvm.task.create(name, args, "llvm")
    space = task.config_space
    valid = [i for i in range(space.range_length) if space.is_index_valid(i)]
    other = next(i for i in valid if _blocks(space.get(i)) != (32, 32))
    log = tmp_path / "raw.log"
    res = MeasureResult((1e-3,), MeasureErrorNo.NO_ERROR, 0.0, 1.0)
    log.write_text(encode(MeasureInput("llvm", task, space.get(other)), res) + "\n")
    (got,) = rr.candidates(str(log), top=1, block=32).values()
    want = {i for i in valid if _blocks(space.get(i)) == (32, 32)}
    assert {c.config.index for c in got} == want and want


def test_candidates_are_timed_in_thread_cpu_time():
    """Time another process (or a sleep) takes from the kernel's thread does not count."""
    import time

    calls = []

    def sleepy(*arrs):
        calls.append(len(arrs))
        time.sleep(0.02)

    ev = _rerank()._timer(sleepy, 3, 1)
    t0 = time.perf_counter()
    per_call = ev(1, 2)
    assert time.perf_counter() - t0 >= 0.06 and calls == [2, 2, 2]
    assert per_call < 0.005


def test_together_times_every_workloads_candidates_in_the_same_rounds(monkeypatch):
    """``--together``: one pool, rounds that visit every candidate of every workload in turn,
    and each workload's winner is its own candidate of lowest statistic."""
    from templtune.autotvm.record import decode

    load_templates()
    rr = _rerank()
    pool = {}
    for name, args in (("conv2d_NCHWc", (1, 6, 6, 32, 32, 3, 3, 1, 1)),
                       ("conv2d_NCHWc_winograd", (1, 6, 6, 32, 32, 3, 3, 1, 1, 16, 16, 2))):
        task = autotvm.task.create(name, args, "llvm")
        space = task.config_space
        idx = [i for i in range(space.range_length) if space.is_index_valid(i)][:2]
        pool[(name, repr(args))] = [MeasureInput("llvm", task, space.get(i)) for i in idx]
    order: list[int] = []
    # NOTE: fake seconds per candidate: the second of the first workload, the first of the
    # second workload are the fastest
    fake = iter([2e-3, 1e-3, 1e-3, 3e-3])

    def timer(mod, number, threads):
        assert threads == 1
        k, cost = len(order_ids), next(fake)
        order_ids.append(k)
        return lambda *arrs: (order.append(k), cost)[1]

    order_ids: list[int] = []
    monkeypatch.setattr(rr, "_timer", timer)
    winners = rr.time_pool(pool, rounds=3, number=1)
    assert order == [0, 1, 2, 3] * 3
    keys = list(pool)
    picked = {k: decode(winners[k])[0].config.index for k in keys}
    assert picked == {keys[0]: pool[keys[0]][1].config.index,
                      keys[1]: pool[keys[1]][0].config.index}
    assert decode(winners[keys[0]])[1].costs == (1e-3, 1e-3, 1e-3)


def test_several_threads_are_timed_by_the_wall_clock_and_named_in_the_record():
    """``--threads 2``: the kernel runs on 2 threads (its other thread's work would be missing
    from the caller's CPU time), timed by the wall clock, and the record says 2."""
    import time

    from templtune.autotvm.record import decode

    ev = _rerank()._timer(lambda *a: time.sleep(0.01), 2, 2)
    assert ev() >= 0.009
    load_templates()
    rr = _rerank()
    args = (1, 6, 6, 32, 32, 3, 3, 1, 1)
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    cfg = task.config_space.get(next(i for i in range(task.config_space.range_length)
                                     if task.config_space.is_index_valid(i)))
    key = ("conv2d_NCHWc", repr(args))
    winners = rr.time_pool({key: [MeasureInput("llvm", task, cfg)]}, rounds=2, number=1,
                           threads=2)
    inp, res = decode(winners[key])
    assert res.threads == 2 and len(res.costs) == 2 and min(res.costs) > 0


def test_winners_replace_the_record_of_their_own_thread_count(tmp_path):
    """A 2-thread winner goes beside the workload's 1-thread record; a 1-thread winner
    replaces the 1-thread record, or one that names no thread count (older logs)."""
    from templtune.autotvm.record import decode, encode
    from templtune.measure.measure import MeasureErrorNo, MeasureResult

    load_templates()
    rr = _rerank()
    args = (1, 6, 6, 32, 32, 3, 3, 1, 1)
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    space = task.config_space
    idx = [i for i in range(space.range_length) if space.is_index_valid(i)][:4]

    def line(i, threads, cost):
        res = MeasureResult((cost,), MeasureErrorNo.NO_ERROR, 0.0, 1.0, threads=threads)
        return encode(MeasureInput("llvm", task, space.get(idx[i])), res)

    other = encode(MeasureInput("llvm", autotvm.task.create("conv2d_NCHWc", (1, 6, 6, 16, 16, 3,
                                                                              3, 1, 1), "llvm"),
                                space.get(idx[0])),
                   MeasureResult((1e-3,), MeasureErrorNo.NO_ERROR, 0.0, 1.0))
    ref = tmp_path / "x86.log"
    ref.write_text("\n".join([line(0, 0, 5e-3), other]) + "\n")
    key = ("conv2d_NCHWc", repr(args))
    rr.write_winners({key: line(1, 2, 2e-3)}, ref)
    rows = [decode(x) for x in ref.read_text().splitlines()]
    assert [(r[0].config.index, r[1].threads) for r in rows] == [
        (idx[0], 0), (idx[0], 0), (idx[1], 2)]
    rr.write_winners({key: line(2, 1, 4e-3)}, ref)
    rr.write_winners({key: line(3, 2, 1e-3)}, ref)
    rows = [decode(x) for x in ref.read_text().splitlines()]
    assert [(r[0].config.index, r[1].threads) for r in rows] == [
        (idx[2], 1), (idx[0], 0), (idx[3], 2)]
    assert rows[1][0].task.args != rows[0][0].task.args
