"""AlterOpLayout chooses each convolution's blocking for the whole network: a record at another
blocking is taken only where it saves more than the layout transforms it brings."""

from __future__ import annotations

import time

import numpy as np
import pytest

from templtune import autotvm
from templtune.autotvm import record
from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from templtune.graph import nn, reference
from templtune.graph.alter_layout import alter_op_layout, nchwc_implementation
from templtune.graph.build import build
from templtune.graph.executor import GraphModule
from templtune.graph.ir import Function
from templtune.graph.transform import PassContext
from templtune.target import Target

RNG = np.random.default_rng(0)


def _net() -> tuple[Function, dict[str, np.ndarray]]:
    """A 3x3 and a 1x1 convolution (two workloads), relu after each."""
    x = nn.var("data", (1, 32, 12, 12))
    w1, w2 = nn.var("w1", (32, 32, 3, 3)), nn.var("w2", (32, 32, 1, 1))
    y = nn.relu(nn.conv2d(x, w1, padding=(1, 1)))
    out = nn.relu(nn.conv2d(y, w2))
    params = {"w1": (RNG.standard_normal((32, 32, 3, 3)) * 0.2).astype("float32"),
              "w2": (RNG.standard_normal((32, 32, 1, 1)) * 0.2).astype("float32")}
    return Function((x, w1, w2), out), params


def _task(conv):
    wkl = nchwc_implementation(conv, Target("llvm")).workload
    return autotvm.task.create(wkl[0], wkl[1:], "llvm")


def _record(path, task, block: int, cost: float) -> None:
    """A record of ``task`` with ``block`` channels in and out."""
    space = task.config_space
    valid = (space.get(i) for i in range(space.range_length) if space.is_index_valid(i))
    cfg = next(c for c in valid if c["tile_ic"].size[-1] == c["tile_oc"].size[-1] == block)
    with open(path, "a") as f:
        f.write(record.encode(MeasureInput(Target("llvm"), task, cfg),
                              MeasureResult((cost,), MeasureErrorNo.NO_ERROR, cost,
                                            time.time())) + "\n")


def _blocks(func) -> list[int]:
    """The input block of each blocked convolution, in order."""
    return [c.args[0].shape[-1] for c in func.calls() if c.op == "nn.contrib_conv2d_NCHWc"]


# NOTE: re-laying the 32x12x12 activation between the layers is estimated at about 7 us: the
# first layer's 8-channel record must beat its 16-channel one by more than that
@pytest.mark.parametrize("cost8, blocks", [(0.97e-4, [16, 16]), (0.85e-4, [8, 16])])
def test_a_faster_blocking_is_taken_only_where_it_pays_for_its_transform(tmp_path, cost8,
                                                                         blocks):
    mod, params = _net()
    c1, c2 = (c for c in mod.calls() if c.op == "nn.conv2d")
    log = tmp_path / "records.log"
    _record(log, _task(c1), 16, 1e-4)
    _record(log, _task(c1), 8, cost8)
    _record(log, _task(c2), 16, 1e-4)
    with autotvm.apply_history_best(str(log)), PassContext(opt_level=3):
        new, _ = alter_op_layout(mod, params, "llvm")
        lib = build(mod, "llvm", params)
    assert _blocks(new) == blocks
    n_transforms = [c.op for c in new.calls()].count("layout_transform")
    assert n_transforms == (2 if blocks[0] == blocks[1] else 3)
    x = RNG.standard_normal((1, 32, 12, 12)).astype(np.float32)
    m = GraphModule(lib["default"]())
    m.run(data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.evaluate(mod, params, data=x),
                               rtol=1e-4, atol=1e-5)


def test_query_candidates_lists_a_workloads_records_fastest_first(tmp_path):
    mod, _ = _net()
    task = _task(mod.calls()[0])
    log = tmp_path / "records.log"
    for block, cost in ((16, 3e-4), (8, 1e-4), (32, 2e-4)):
        _record(log, task, block, cost)
    with autotvm.apply_history_best(str(log)) as ctx:
        got = ctx.query_candidates(Target("llvm"), task.workload)
        assert [c for _, c in got] == pytest.approx([1e-4, 2e-4, 3e-4])
        assert [cfg["tile_oc"].size[-1] for cfg, _ in got] == [8, 32, 16]
        # another workload's query finds none here (the reference logs may have some)
        with autotvm.env.scope(use_reference_logs=False):
            assert ctx.query_candidates(Target("llvm"), ("conv2d_NCHWc", 1, 2)) == []
