"""CUDA Winograd with weights transformed once at build time: ``relay.build`` for cuda folds
``G g G^T`` into the parameters, the kernel takes ``[alpha, alpha, CI, CO]`` weights and
computes no weight transform, the records of the plain task configure it, and the network
matches numpy on the emulator (and its kernels compile with nvcc)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import templtune
from templtune import autotvm, graph, relay
from templtune.autotvm import record, strategy
from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from templtune.autotvm.task.task import create
from templtune.codegen.cuda.compile import find_nvcc
from templtune.contrib import graph_executor
from templtune.graph import nn
from templtune.graph.autotvm_integration import candidates, op_call
from templtune.target import Target
from templtune.topi.testing import conv2d_nchw_python

HAVE_NVCC = find_nvcc() is not None
NAME = "conv2d_nchw_winograd.cuda"
RNG = np.random.default_rng(11)


def _net(batch: int = 1) -> tuple[graph.Function, dict[str, np.ndarray]]:
    x = nn.var("data", (batch, 8, 6, 6))
    w, b = nn.var("w", (16, 8, 3, 3)), nn.var("b", (16,))
    out = nn.relu(nn.bias_add(nn.conv2d(x, w, padding=(1, 1)), b))
    params = {"w": (RNG.standard_normal((16, 8, 3, 3)) * 0.3).astype("float32"),
              "b": RNG.standard_normal(16).astype("float32")}
    return graph.Function((x, w, b), out), params


def _space(task: Any) -> Any:
    assert task.config_space is not None
    return task.config_space


def _record(path: str, args: tuple, index: int | None = None, cost: float = 1e-6) -> object:
    """A record of the plain task ``args`` (config ``index``, else a sampled one)."""
    task = create(NAME, args, "cuda")
    space = _space(task)
    if index is None:
        index = int(next(iter(space.sample_ints(1, np.random.default_rng(0)))))
    cfg = space.get(index)
    with open(path, "a") as f:
        f.write(record.encode(MeasureInput(Target("cuda"), task, cfg),
                              MeasureResult((cost,), MeasureErrorNo.NO_ERROR, cost, time.time())) + "\n")
    return cfg


def _run(lib: graph.GraphExecutorFactoryModule, net: graph.Function,
         params: dict[str, np.ndarray]) -> None:
    x = RNG.standard_normal(net.params[0].shape).astype("float32")
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("data", x)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(net, params, data=x),
                               rtol=1e-3, atol=1e-4)


def _plain(m: int) -> tuple:
    conv = _net()[0].calls()[0]
    return next(c.args for c in candidates(conv, "cuda")
                if c.name == NAME and c.transform is None and c.args[8] == m)


def test_the_strategy_registers_a_pretransformed_variant_tuned_as_the_plain_task() -> None:
    conv = _net()[0].calls()[0]
    wino = [c for c in candidates(conv, "cuda") if c.name == NAME]
    pre = [c for c in wino if c.transform is not None]
    assert [c.args[8] for c in pre] == [2, 4] and all(c.args[9] == 1 for c in pre)
    for c in pre:  # configured by the plain task's records
        assert c.workload == (NAME, *c.args[:9]) and c.tuned_as == c.args[:9]
    w = RNG.standard_normal((16, 8, 3, 3)).astype("float32")
    u = strategy.weight_transform(NAME, pre[0].args)(w)  # type: ignore[misc]
    assert u.shape == (4, 4, 8, 16)
    assert strategy.weight_transform(NAME, pre[0].args[:9]) is None
    # a runtime weight cannot be pre-transformed
    plain = strategy.select(op_call(conv), "cuda", allow_transform=False)
    assert plain is not None and plain.transform is None


@pytest.mark.parametrize("m", [2, 4])
def test_pretransformed_template_matches_numpy_for_sampled_configs(m: int) -> None:
    from templtune.templates._strategy import winograd_weights

    args = (1, 7, 7, 8, 4, 3, 3, (1, 1), m)
    plain_task, pre_task = create(NAME, args, "cuda"), create(NAME, (*args, 1), "cuda")
    plain, pre = _space(plain_task), _space(pre_task)
    # the same config space: a record of one configures the other
    assert len(pre) == len(plain) and pre.space_map.keys() == plain.space_map.keys()
    data = RNG.standard_normal((1, 4, 7, 7)).astype("float32")
    kernel = RNG.standard_normal((8, 4, 3, 3)).astype("float32")
    ref = conv2d_nchw_python(data, kernel, (1, 1), (1, 1))
    u = winograd_weights(m)(kernel)
    for idx in pre.sample_ints(2, np.random.default_rng(m)):
        cfg = pre.get(int(idx))
        with Target("cuda"):
            s, tensors = pre_task.instantiate(cfg)
            f = templtune.build(s, tensors, "cuda")
        assert tuple(f.params[1].shape) == (m + 2, m + 2, 4, 8)
        assert "kernel_pack" not in f.get_source()
        with Target("cuda"):
            s, tensors = plain_task.instantiate(plain.get(int(idx)))
            assert "kernel_pack" in templtune.build(s, tensors, "cuda").get_source()
        if HAVE_NVCC:
            assert f.binary, "not compiled by nvcc"
        out = np.zeros(ref.shape, np.float32)
        f(data, u, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@pytest.mark.parametrize("m", [2, 4])
def test_build_folds_the_weight_transform_and_runs_the_plain_tasks_record(tmp_path, m: int
                                                                          ) -> None:
    net, params = _net()
    log = str(tmp_path / "wino.log")
    cfg = _record(log, _plain(m))
    with autotvm.apply_history_best(log):
        lib = relay.build(net, target="cuda", params=params)
    (conv,) = [g for g in lib.groups if g.impl == f"autotvm:{NAME}"]
    assert conv.tuned
    weight = conv.steps[0].inputs[1]
    assert isinstance(weight, np.ndarray) and weight.shape == (m + 2, m + 2, 8, 16)
    k = conv.steps[0].kernel
    assert tuple(k.params[1].shape) == (m + 2, m + 2, 8, 16)
    # four kernels: input transform, batched GEMM, inverse transform, output; none computes
    # G g G^T
    assert len(k.launches) == 4 and "kernel_pack" not in k.get_source()
    # the GEMM (the second kernel) runs the plain task's recorded config
    sizes = [cfg[k].size for k in ("tile_b", "tile_y", "tile_x")]  # type: ignore[index]
    assert k.launches[1].block == tuple(t[2] for t in reversed(sizes))
    if HAVE_NVCC:
        assert all(kk.binary for g in lib.groups for kk in g.kernels)
    _run(lib, net, params)


def test_extraction_gives_the_plain_task_and_its_tuned_record_applies(tmp_path) -> None:
    net, params = _net()
    log = str(tmp_path / "wino.log")
    _record(log, _plain(2))
    with autotvm.apply_history_best(log):
        tasks = autotvm.task.extract_from_program(net, params, "cuda")
    assert [(t.name, t.args) for t in tasks] == [(NAME, _plain(2))]
    # tune the extracted (plain) task for real, then build: the record configures the
    # pre-transformed kernel
    tuned = str(tmp_path / "tuned.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=1, repeat=1, timeout=120))
    tuner = autotvm.tuner.RandomTuner(tasks[0], seed=0)
    tuner.tune(n_trial=1, measure_option=option, callbacks=[autotvm.callback.log_to_file(tuned)])
    with autotvm.apply_history_best(tuned):
        lib = relay.build(net, target="cuda", params=params)
    (conv,) = [g for g in lib.groups if g.impl == f"autotvm:{NAME}"]
    assert conv.tuned and conv.steps[0].inputs[1].shape == (4, 4, 8, 16)
    _run(lib, net, params)


def test_without_records_a_batched_net_falls_back_to_pretransformed_winograd() -> None:
    # batch 2: the direct template takes batch 1 only, so Winograd is the top strategy
    net, params = _net(batch=2)
    with autotvm.apply_history_best([]):
        lib = relay.build(net, target="cuda", params=params)
    (conv,) = [g for g in lib.groups if g.impl == f"autotvm:{NAME}"]
    assert not conv.tuned and conv.steps[0].inputs[1].shape == (6, 6, 8, 16)
    _run(lib, net, params)
