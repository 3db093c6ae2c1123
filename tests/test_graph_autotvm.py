"""AutoTVM templates inside networks: implementation choice by recorded cost, weight
pre-transforms (packing, Winograd), extract_from_program, real tuning + apply_history_best.
Every build is checked against the numpy interpreter."""

from __future__ import annotations

import time

import numpy as np
import pytest

from templtune import autotvm, graph, transform
from templtune.autotvm import record
from templtune.autotvm.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureInput,
    MeasureResult,
    measure_option,
)
from templtune.autotvm.task.task import create
from templtune.graph import nn
from templtune.graph.autotvm_integration import candidates, extract_from_program
from templtune.target import Target

RNG = np.random.default_rng(3)


def _small_net() -> tuple[graph.Function, dict[str, np.ndarray]]:
    data = nn.var("data", (1, 16, 8, 8))
    w0, b0 = nn.var("w0", (32, 16, 3, 3)), nn.var("b0", (32,))
    wd, fc = nn.var("wd", (32, 1, 3, 3)), nn.var("fc", (24, 32 * 8 * 8))
    y = nn.relu(nn.bias_add(nn.conv2d(data, w0, padding=1), b0))
    y = nn.conv2d(y, wd, padding=1, groups=32)
    y = nn.dense(nn.batch_flatten(y), fc)
    params = {"w0": RNG.standard_normal((32, 16, 3, 3)).astype("float32") * 0.2,
              "b0": RNG.standard_normal(32).astype("float32"),
              "wd": RNG.standard_normal((32, 1, 3, 3)).astype("float32"),
              "fc": RNG.standard_normal((24, 2048)).astype("float32") * 0.05}
    return graph.Function((data, w0, b0, wd, fc), y), params


def _check(lib: graph.GraphExecutorFactoryModule, net: graph.Function,
           params: dict[str, np.ndarray]) -> None:
    x = RNG.standard_normal(net.params[0].shape).astype("float32")
    m = graph.GraphModule(lib)
    m.set_input("data", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(net, params, data=x),
                               rtol=1e-3, atol=1e-3)


def _fake_record(path: str, name: str, args: tuple, cost: float) -> None:
    task = create(name, args, "llvm")
    cfg = task.config_space.get(next(iter(task.config_space.sample_ints(1))))
    res = MeasureResult((cost,), 0, cost, time.time())
    with open(path, "a") as f:
        f.write(record.encode(MeasureInput(Target("llvm"), task, cfg), res) + "\n")


def test_default_build_uses_templates_and_packs_weights() -> None:
    net, params = _small_net()
    lib = graph.build(net, "llvm", params)
    impls = [cg.impl for cg in lib.groups]
    assert impls[0] == "autotvm:conv2d_nchw" and len(lib.groups[0].steps) == 1  # tail fused
    assert "autotvm:depthwise_conv2d_nchw" in impls and impls[-1] == "autotvm:dense"
    packed = lib.groups[0].steps[0].inputs[1]
    assert isinstance(packed, np.ndarray) and packed.ndim == 5  # [CO/b, CI, KH, KW, b]
    _check(lib, net, params)
    with transform.PassContext(config={"templtune.graph.use_templates": False}):
        assert all(cg.impl == "default" for cg in graph.build(net, "llvm", params).groups)


@pytest.mark.parametrize("m", [2, 4])
def test_cheapest_record_picks_winograd_with_pretransformed_weights(tmp_path, m: int) -> None:
    net, params = _small_net()
    conv = net.calls()[0]
    wino = [c for c in candidates(conv) if c.name == "conv2d_winograd" and c.args[-2] == m]
    log = str(tmp_path / "fake.log")
    _fake_record(log, wino[0].name, wino[0].args, 1e-6)
    _fake_record(log, "conv2d_nchw", candidates(conv)[0].args, 1e-3)
    with autotvm.apply_history_best(log):
        lib = graph.build(net, "llvm", params)
    assert lib.groups[0].impl == "autotvm:conv2d_winograd" and lib.groups[0].tuned
    _check(lib, net, params)


def test_extract_from_program_then_tune_and_apply(tmp_path) -> None:
    net, params = _small_net()
    # as TVM's, extraction assumes opt_level 3: the convolution's task is conv2d_NCHWc ...
    assert autotvm.task.extract_from_program(net, params, "llvm")[0].name == "conv2d_NCHWc"
    # ... unless the NCHW[x]c pass is off, as for the opt_level 2 build below
    with transform.PassContext(disabled_pass=["AlterOpLayout"]):
        tasks = autotvm.task.extract_from_program(net, params, "llvm")
    assert [t.name for t in tasks] == ["conv2d_nchw", "depthwise_conv2d_nchw", "dense"]
    assert [t.name for t in extract_from_program(net, params, Target("llvm"),
                                                 ops=["nn.dense"])] == ["dense"]
    log = str(tmp_path / "tuned.log")
    opt = measure_option(LocalBuilder(n_parallel=2), LocalRunner(number=2, repeat=1,
                                                                 cooldown_interval=0))
    tuner = autotvm.tuner.RandomTuner(tasks[0], seed=0)
    tuner.tune(n_trial=3, measure_option=opt, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        lib = graph.build(net, "llvm", params)
    assert lib.groups[0].tuned and lib.groups[0].impl == "autotvm:conv2d_nchw"
    _check(lib, net, params)
