"""The CUDA NHWC conv2d template ``conv2d_nhwc.cuda``: sampled configs of its space compute
what numpy computes (CPU emulator) and compile with nvcc, its space is pruned to the target's
limits, the command line lists and tunes it, AutoTVM extraction of NHWC networks gives its
tasks and ``relay.build`` for cuda runs it (with records and with fallback configs)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import templtune
from templtune import autotvm, graph, relay
from templtune.autotvm import strategy
from templtune.autotvm.space import ConfigEntity
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.autotvm.task.task import TASK_TABLE, create
from templtune.codegen.cuda.build import limits_from_target, precheck
from templtune.codegen.cuda.compile import find_nvcc
from templtune.contrib import graph_executor
from templtune.errors import InstantiationError
from templtune.graph import nn
from templtune.lower.lower_api import lower
from templtune.target import Target
from templtune.topi.testing import conv2d_nhwc_python

NAME = "conv2d_nhwc.cuda"
HAVE_NVCC = find_nvcc() is not None
strategy.load_templates()


def _space(task: Any) -> Any:
    assert task.config_space is not None
    return task.config_space


def _build(func: Any, *args: Any) -> Any:
    with Target("cuda"):
        s, tensors = func(*args)
        return templtune.build(s, tensors, "cuda")


@pytest.mark.parametrize("args", [
    (1, 9, 9, 16, 8, 3, 3, 1, 1),
    (2, 8, 7, 12, 3, 3, 3, 2, (1, 0)),     # batch 2, stride 2, 3 input channels, odd sizes
    (1, 6, 6, 24, 20, 1, 1, 1, 0),          # 1x1, channel counts no knob divides
])
def test_sampled_configs_match_numpy_and_compile(args: tuple) -> None:
    n, h, w, co, ci, kh, kw, stride, pad = args
    task = create(NAME, args, "cuda")
    space = _space(task)
    rng = np.random.default_rng(sum(args[:7]))
    data = rng.standard_normal((n, h, w, ci)).astype("float32")
    kernel = rng.standard_normal((kh, kw, ci, co)).astype("float32")
    ref = conv2d_nhwc_python(data, kernel, stride, pad)
    for idx in space.sample_ints(3, rng):
        cfg = space.get(int(idx))
        with Target("cuda"):
            s, tensors = task.instantiate(cfg)
            f = templtune.build(s, tensors, "cuda")
        (launch,) = f.launches
        assert launch.block == (cfg["num_thread_c"].val, cfg["num_thread_n"].val, 1), cfg
        if HAVE_NVCC:
            assert f.binary, "not compiled by nvcc"
        out = np.zeros(ref.shape, np.float32)
        f(data, kernel, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def test_lockstep_emulation_finds_no_shared_memory_race() -> None:
    from templtune.runtime.cuda.emulate import emulate

    args = (1, 5, 6, 8, 6, 3, 3, 1, 1)
    task = create(NAME, args, "cuda")
    space = _space(task)
    rng = np.random.default_rng(3)
    data = rng.standard_normal((1, 5, 6, 6)).astype("float32")
    kernel = rng.standard_normal((3, 3, 6, 8)).astype("float32")
    ref = conv2d_nhwc_python(data, kernel, 1, 1)
    for idx in space.sample_ints(2, rng):
        cfg = space.get(int(idx))
        with Target("cuda"):
            s, tensors = task.instantiate(cfg)
        out = np.zeros(ref.shape, np.float32)
        emulate(lower(s, tensors, "default_function"), data, kernel, out, check_races=True)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def _verdict(task: Any, index: int, lim: Any) -> str:
    """The CUDA backend's resource check of config ``index`` (empty: within ``lim``)."""
    cfg = ConfigEntity(index, None, _space(task)._entities_at(index), [])
    with Target(str(task.target)):
        s, tensors = task.instantiate(cfg)
    try:
        precheck(lower(s, tensors, "default_function"), lim)
    except InstantiationError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("args, limits", [
    ((1, 3, 40, 32, 6, 3, 3, 1, 1), "-max_threads_per_block=64 -max_shared_memory_per_block=1024"),
    ((1, 3, 41, 16, 5, 3, 3, 2, (1, 0)),
     "-max_threads_per_block=128 -max_shared_memory_per_block=768"),
])
def test_space_keeps_exactly_the_configs_within_the_target_limits(args: tuple, limits: str
                                                                  ) -> None:
    task = create(NAME, args, f"cuda {limits}")
    space = _space(task)
    assert set(space.space_map) == {"tile_n", "num_thread_n", "vthread_n", "tile_c",
                                    "num_thread_c", "vthread_c", "step"}
    lim = limits_from_target(task.target)
    valid = space._valid_all()
    # on a target without limits only the idle-thread filter applies: check all it keeps
    checked = np.flatnonzero(_space(create(NAME, args, "llvm"))._valid_all())
    n_fit = 0
    for index in checked:
        msg = _verdict(task, int(index), lim)
        n_fit += msg == ""
        assert bool(valid[index]) == (msg == ""), (space._entities_at(int(index)), msg)
    assert 0 < n_fit == len(space) < len(checked)


def test_fallback_config_runs() -> None:
    args = (1, 14, 14, 32, 16, 3, 3, 1, 1)
    rng = np.random.default_rng(2)
    data = rng.standard_normal((1, 14, 14, 16)).astype("float32")
    kernel = rng.standard_normal((3, 3, 16, 32)).astype("float32")
    with autotvm.ApplyConfig(FallbackConfigEntity()):
        f = _build(TASK_TABLE[NAME], *args)
    out = np.zeros((1, 14, 14, 32), np.float32)
    f(data, kernel, out)
    np.testing.assert_allclose(out, conv2d_nhwc_python(data, kernel, 1, 1), rtol=1e-4,
                               atol=1e-4)


def test_cli_lists_and_tunes_the_template(capsys, tmp_path) -> None:
    from templtune.cli.main import main

    assert main(["templates", "--target", "cuda"]) == 0
    names = {ln.split()[0] for ln in capsys.readouterr().out.splitlines()
             if ln and not ln.startswith(" ")}
    assert NAME in names
    log = tmp_path / "nhwc.log"
    rc = main(["tune", "--template", NAME, "--args", "1,6,6,8,4,3,3,1,1", "--target", "cuda",
               "--tuner", "random", "--n-trial", "2", "--log", str(log)])
    assert rc == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 2 and all(r["result"][1] == 0 for r in rows), rows


def _small_nhwc_net() -> tuple[graph.Function, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    params: dict[str, np.ndarray] = {}
    weights: list[graph.Var] = []

    def p(name: str, shape: tuple[int, ...]) -> graph.Var:
        params[name] = (rng.standard_normal(shape) * 0.3).astype("float32")
        weights.append(nn.var(name, shape))
        return weights[-1]

    x = nn.var("data", (1, 10, 10, 3))
    y = nn.relu(nn.bias_add(nn.conv2d(x, p("w0", (3, 3, 3, 8)), padding=(1, 1),
                                      data_layout="NHWC"), p("b0", (8,)), axis=3))
    z = nn.relu(nn.conv2d(y, p("w1", (3, 3, 8, 16)), strides=(2, 2), padding=(1, 1),
                          data_layout="NHWC"))
    r = nn.relu(nn.add(nn.conv2d(z, p("w2", (1, 1, 16, 16)), data_layout="NHWC"), z))
    g = nn.batch_flatten(nn.global_avg_pool2d(r, layout="NHWC"))
    out = nn.dense(g, p("fc", (10, 16)))
    return graph.Function((x, *weights), out), params


def _check(lib: Any, net: graph.Function, params: dict[str, np.ndarray]) -> None:
    x = np.random.default_rng(9).standard_normal(net.params[0].shape).astype("float32")
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("data", x)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(net, params, data=x),
                               rtol=1e-3, atol=1e-4)


def test_extraction_and_build_of_an_nhwc_network(tmp_path) -> None:
    net, params = _small_nhwc_net()
    tasks = autotvm.task.extract_from_program(net, params, "cuda")
    assert [t.name for t in tasks] == [NAME, NAME, NAME, "dense.cuda"]
    assert [t.args[:7] for t in tasks[:3]] == [(1, 10, 10, 8, 3, 3, 3), (1, 10, 10, 16, 8, 3, 3),
                                               (1, 5, 5, 16, 16, 1, 1)]
    # fallback configs
    with autotvm.apply_history_best([]):
        lib = relay.build(net, target="cuda", params=params)
    convs = [g for g in lib.groups if g.impl == f"autotvm:{NAME}"]
    assert len(convs) == 3 and not any(g.tuned for g in convs)
    if HAVE_NVCC:
        assert all(k.binary for g in lib.groups for k in g.kernels)
    _check(lib, net, params)
    # a record of one task (tuned for real) is what builds its layer
    log = str(tmp_path / "nhwc.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=1, repeat=1, timeout=120))
    tuner = autotvm.tuner.RandomTuner(tasks[1], seed=0)
    tuner.tune(n_trial=1, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        lib = relay.build(net, target="cuda", params=params)
    tuned = [g for g in lib.groups if g.impl == f"autotvm:{NAME}" and g.tuned]
    assert len(tuned) == 1 and tuned[0].group.calls[0].args[0].shape == (1, 10, 10, 8)
    _check(lib, net, params)


def test_extraction_from_an_nhwc_resnet_gives_nhwc_tasks() -> None:
    net, params, _, _ = graph.testing.get_network("resnet-18", layout="NHWC",
                                                  image_shape=(32, 32, 3))
    tasks = autotvm.task.extract_from_program(net, params, "cuda", ops=["nn.conv2d"])
    assert tasks and {t.name for t in tasks} == {NAME}
    assert len(tasks) == len({t.args for t in tasks}) >= 8


@pytest.mark.slow
def test_nhwc_resnet_on_cuda_matches_numpy() -> None:
    net, params, ishape, _ = graph.testing.get_network("resnet-18", layout="NHWC",
                                                       image_shape=(32, 32, 3))
    lib = relay.build(net, target="cuda", params=params)
    assert sum(g.impl == f"autotvm:{NAME}" for g in lib.groups) >= 8
    x = np.random.default_rng(0).standard_normal(ishape).astype("float32")
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("data", x)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(net, params, data=x),
                               rtol=1e-3, atol=1e-5)
