"""Records name the thread count they were timed at, and a build prefers the records of its
own thread count: the runner writes ``"threads"``, ``ApplyHistoryBest`` answers a query from
the records timed at the build's count when it holds any for the workload, and the strategy
selection between implementations (Winograd against the direct conv) follows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from templtune import autotvm, config, graph
from templtune.autotvm import strategy
from templtune.autotvm.measure import MeasureInput
from templtune.autotvm.record import decode, encode, load_from_buffer
from templtune.graph import nn
from templtune.graph.autotvm_integration import op_call
from templtune.measure.measure import MeasureErrorNo, MeasureResult, error_result
from templtune.templates import load as load_templates

ARGS = (1, 6, 6, 32, 32, 3, 3, 1, 1)


def _task(name: str = "conv2d_NCHWc", args: tuple = ARGS):
    load_templates("x86")
    return autotvm.task.create(name, args, "llvm")


def _valid(task, n: int) -> list[int]:
    space = task.config_space
    return [i for i in range(space.range_length) if space.is_index_valid(i)][:n]


def _record(task, index: int, cost: float, threads: int = 0) -> tuple:
    res = MeasureResult((cost,), MeasureErrorNo.NO_ERROR, 0.0, 1.0, threads=threads)
    return MeasureInput("llvm", task, task.config_space.get(index)), res


def test_thread_count_round_trips_and_is_left_out_where_unknown() -> None:
    task = _task()
    i = _valid(task, 1)[0]
    line = encode(*_record(task, i, 1e-3, threads=2))
    assert json.loads(line)["threads"] == 2 and decode(line)[1].threads == 2
    assert "threads" not in json.loads(encode(*_record(task, i, 1e-3)))
    failed = error_result(MeasureErrorNo.RUNTIME_DEVICE, "boom", 0.0, 1.0)
    assert "threads" not in json.loads(encode(_record(task, i, 1e-3)[0], failed))
    assert decode(encode(*_record(task, i, 1e-3)))[1].threads == 0  # a TVM log's record


@pytest.mark.parametrize("bad", [0, -1, "2", 2.0, True, 1 << 20, None])
def test_a_bad_thread_count_is_a_bad_line(bad, caplog) -> None:
    task = _task()
    row = json.loads(encode(*_record(task, _valid(task, 1)[0], 1e-3, threads=2)))
    row["threads"] = bad
    with pytest.raises(ValueError, match="threads"):
        decode(json.dumps(row))
    import io

    good = encode(*_record(task, _valid(task, 1)[0], 2e-3, threads=1))
    got = list(load_from_buffer(io.StringIO(json.dumps(row) + "\n" + good + "\n")))
    assert [r[1].threads for r in got] == [1]  # the bad line is skipped, not fatal


def test_the_runner_records_the_threads_the_kernel_ran_with() -> None:
    task = _task()
    inp = MeasureInput("llvm", task, task.config_space.get(_valid(task, 1)[0]))
    for n in (1, 2):
        opt = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1, timeout=120),
                                     autotvm.LocalRunner(number=1, repeat=1, timeout=120))
        with config.scope(TEMPLTUNE_NUM_THREADS=n):
            batch = autotvm.measure.create_measure_batch(task, opt)
            try:
                (res,) = batch([inp])
            finally:
                batch.close()
        assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_detail
        assert res.threads == n
        assert json.loads(encode(inp, res))["threads"] == n


def test_a_query_answers_from_the_records_of_the_builds_thread_count() -> None:
    task = _task()
    a, b, c = _valid(task, 3)
    other = _task(args=(1, 6, 6, 16, 16, 3, 3, 1, 1))
    recs = [_record(task, a, 1.0e-3, threads=1), _record(task, b, 0.5e-3, threads=2),
            _record(task, c, 0.8e-3), _record(other, _valid(other, 1)[0], 2e-3)]
    ctx = autotvm.apply_history_best(recs)
    wkl = task.workload
    for target, want, cost in (("llvm -num-cores=1", a, 1.0e-3),
                               ("llvm -num-cores=2", b, 0.5e-3),
                               ("llvm -num-cores=4", c, 0.8e-3)):  # none at 4: no count
        with ctx:
            assert ctx.query(target, wkl).index == want, target
            assert ctx.query_cost(target, wkl) == pytest.approx(cost)
            assert ctx.query_candidates(target, wkl)[0][0].index == want
    with ctx, config.scope(TEMPLTUNE_NUM_THREADS=1):
        assert ctx.query("llvm", wkl).index == a
    # a workload without records at the build's count, nor any without a count, answers
    # from all of its records
    with ctx:
        assert ctx.query("llvm -num-cores=1", other.workload).index == _valid(other, 1)[0]
    only2 = autotvm.apply_history_best([_record(task, a, 2e-3, threads=2),
                                        _record(task, b, 1e-3, threads=3)])
    with only2:
        assert only2.query("llvm -num-cores=2", wkl).index == a
        assert only2.query("llvm -num-cores=1", wkl).index == b
    # a config the user stores answers at every thread count
    user = task.config_space.get(c)
    ctx.update("llvm -num-cores=1", wkl, user)
    assert ctx.query("llvm -num-cores=2", wkl) is user


def test_reference_logs_answer_per_thread_count(tmp_path) -> None:
    """The fallback context's reference records: its cache must not hand a config chosen for
    one thread count to a build at another."""
    task = _task()
    a, b = _valid(task, 2)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "extra.log").write_text(
        encode(*_record(task, a, 1e-3, threads=1)) + "\n"
        + encode(*_record(task, b, 0.6e-3, threads=2)) + "\n")
    with config.scope(TEMPLTUNE_REFERENCE_LOG_DIR=(tmp_path,)):
        root = autotvm.FallbackContext()
        for n, want in ((1, a), (2, b), (1, a)):
            with config.scope(TEMPLTUNE_NUM_THREADS=n):
                assert root.query("llvm", task.workload).index == want


def test_the_implementation_follows_the_builds_thread_count() -> None:
    """Winograd wins the 1-thread records, the direct conv the 2-thread ones: each build runs
    the winner at its own count, and computes the conv."""
    call = op_call(nn.conv2d(nn.var("x", (1, 32, 6, 6)), nn.var("w", (32, 32, 3, 3)),
                             padding=1))
    impls = {i.template: i for i in strategy.implementations(call, "llvm")}
    direct, wino = impls["conv2d_nchw"], impls["conv2d_winograd"]
    recs = []
    for impl, costs in ((direct, (2e-3, 1e-3)), (wino, (1e-3, 2e-3))):
        task = autotvm.task.create(impl.template, impl.workload[1:], "llvm")
        i = _valid(task, 1)[0]
        recs += [_record(task, i, costs[0], threads=1), _record(task, i, costs[1], threads=2)]
    with autotvm.apply_history_best(recs):
        got = {n: strategy.select(call, f"llvm -num-cores={n}").template for n in (1, 2)}
    assert got == {1: "conv2d_winograd", 2: "conv2d_nchw"}

    x, w = nn.var("x", (1, 32, 6, 6)), nn.var("w", (32, 32, 3, 3))
    net = graph.Function((x, w), nn.conv2d(x, w, padding=1))
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 32, 6, 6)).astype(np.float32)
    wv = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    want = graph.evaluate(net, {"w": wv}, x=xv)
    for n, impl in ((1, "conv2d_winograd"), (2, "conv2d_nchw")):
        with autotvm.apply_history_best(recs):
            lib = graph.build(net, f"llvm -num-cores={n}", {"w": wv})
        assert [g.impl for g in lib.groups] == [f"autotvm:{impl}"]
        m = graph.GraphModule(lib)
        m.set_input("x", xv)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-3, atol=1e-3)
