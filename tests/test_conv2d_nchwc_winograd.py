"""The x86 ``conv2d_NCHWc_winograd`` template: random legal configs of random workloads match
numpy (whole and partial tiles, both tile sizes, mixed blocks, a fused epilogue), bad arguments
are refused by name, and a network layer runs it exactly when its record beats the direct
kernel's."""

from __future__ import annotations

import time
from contextlib import nullcontext

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm, topi
from templtune.autotvm import record, strategy
from templtune.autotvm.epilogue import Epilogue, EpilogueInput
from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from templtune.autotvm.strategy import OpCall
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.graph import nn, reference
from templtune.graph.build import build
from templtune.graph.executor import GraphModule
from templtune.graph.ir import Function
from templtune.graph.ops.nchwc import pack_bias, pack_data, pack_kernel, unpack_data
from templtune.graph.transform import PassContext
from templtune.target import Target
from templtune.templates.x86.conv2d_nchwc_winograd import TEMPLATE, transform_weight
from templtune.topi import testing as ref


def _build(args: tuple, cfg, epilogue: Epilogue | None = None):
    task = autotvm.task.create(TEMPLATE, args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = (task.func(*args) if epilogue is None
                        else task.func(*args, epilogue=epilogue))
    return templtune.build(sch, tensors, target="llvm"), tensors


def _inputs(args: tuple, rng: np.random.Generator):
    n, h, w, co, ci, _, _, _, pad, ic_bn, oc_bn, m = args
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, 3, 3)).astype(np.float32)
    u = transform_weight(m, ic_bn, oc_bn)(pack_kernel(k, ic_bn, oc_bn))
    return x, k, u, ref.conv2d_nchw_python(x, k, 1, pad)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ci=st.sampled_from([8, 16, 32]), co=st.sampled_from([16, 32]), h=st.integers(3, 10),
       w=st.integers(3, 9), pad=st.integers(0, 1), m=st.sampled_from([2, 4]),
       n=st.sampled_from([1, 2]), pick=st.integers(0, 10 ** 6))
def test_random_configs_match_numpy(ci, co, h, w, pad, m, n, pick):
    rng = np.random.default_rng(pick)
    ic_bn = int(rng.choice([b for b in (8, 16) if ci % b == 0]))
    args = (n, h, w, co, ci, 3, 3, 1, pad, ic_bn, 16, m)
    space = autotvm.task.create(TEMPLATE, args, "llvm").config_space
    cfg = space.get(space.get_rand_index(rng=rng))
    mod, tensors = _build(args, cfg)
    x, _, u, expect = _inputs(args, rng)
    out = np.zeros(tuple(int(d) for d in tensors[-1].shape), np.float32)
    mod(pack_data(x, ic_bn), u, out)
    # NOTE: F(4x4) adds and scales larger intermediates than a direct sum (fp32 rounding)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=2e-3, atol=2e-3, err_msg=str(cfg))


@pytest.mark.parametrize("fuse_rows", [False, True])
@pytest.mark.parametrize("m", [2, 4])
def test_both_stage_orders_match_numpy(fuse_rows, m):
    # two images, partial last tiles: the row pipeline's regions cross both
    args = (2, 11, 16, 64, 16, 3, 3, 1, 1, 16, 32, m)
    space = autotvm.task.create(TEMPLATE, args, "llvm").config_space
    rng = np.random.default_rng(m)
    cfg = next(c for c in (space.get(i) for i in space.sample_ints(len(space), rng))
               if c["fuse_rows"].val == fuse_rows)
    mod, tensors = _build(args, cfg)
    x, _, u, expect = _inputs(args, rng)
    out = np.zeros(tuple(int(d) for d in tensors[-1].shape), np.float32)
    mod(pack_data(x, 16), u, out)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=2e-3, atol=2e-3, err_msg=str(cfg))


def test_fallback_with_bias_residual_relu_epilogue():
    args = (1, 14, 14, 64, 32, 3, 3, 1, 1, 32, 32, 4)
    out_shape = (1, 2, 14, 14, 32)
    ep = Epilogue((EpilogueInput((1, 2, 1, 1, 32)), EpilogueInput(out_shape)),
                  lambda out, ins: topi.nn.relu(topi.add(topi.add(out, ins[0]), ins[1])),
                  "bias_add_relu")
    mod, tensors = _build(args, FallbackConfigEntity(), ep)
    assert len(tensors) == 5
    rng = np.random.default_rng(5)
    x, _, u, conv = _inputs(args, rng)
    b = rng.standard_normal(64).astype(np.float32)
    r = rng.standard_normal((1, 64, 14, 14)).astype(np.float32)
    out = np.zeros(out_shape, np.float32)
    mod(pack_data(x, 32), u, pack_bias(b, 32), pack_data(r, 32), out)
    expect = np.maximum(conv + b[None, :, None, None] + r, 0)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=2e-3, atol=2e-3)


def test_space_blocks_fit_the_accumulator_registers():
    from templtune.templates.x86._common import target_vector, vec_regs

    lanes, regs = target_vector(Target("llvm"))
    space = autotvm.task.create(TEMPLATE, (1, 56, 56, 64, 64, 3, 3, 1, 1, 32, 32, 4),
                                "llvm").config_space
    accs = [e["tile_p"].val * e["tile_kb"].val * vec_regs(32, lanes)
            for e in (space.get(i) for i in space.sample_ints(len(space),
                                                               np.random.default_rng(0)))]
    assert accs and max(accs) <= regs and min(accs) * 2 >= min(max(accs), regs)


@pytest.mark.parametrize("args, what", [
    ((1, 8, 8, 16, 16, 3, 3, 2, 1, 16, 16, 2), "stride"),
    ((1, 8, 8, 16, 16, 5, 5, 1, 2, 16, 16, 2), "3x3"),
    ((1, 8, 8, 16, 16, 3, 3, 1, 1, 16, 16, 3), "tile size"),
    ((1, 8, 8, 16, 24, 3, 3, 1, 1, 16, 16, 2), "do not divide"),
])
def test_bad_arguments_are_named(args, what):
    with pytest.raises(ValueError, match=what):
        _build(args, FallbackConfigEntity())


def test_weight_transform_refuses_another_blocking():
    k = np.zeros((2, 2, 3, 3, 16, 16), np.float32)
    with pytest.raises(ValueError, match="16i16o"):
        transform_weight(2, 32, 32)(k)


# ---- in a network: the record decides ----------------------------------------------------------
RNG = np.random.default_rng(7)
ARGS = (1, 12, 12, 32, 32, 3, 3, 1, 1)


def _net(hw: int = 12) -> tuple[Function, dict[str, np.ndarray]]:
    x = nn.var("data", (1, 32, hw, hw))
    w1, b1, w2 = nn.var("w1", (32, 32, 3, 3)), nn.var("b1", (32,)), nn.var("w2", (32, 32, 3, 3))
    y = nn.relu(nn.bias_add(nn.conv2d(x, w1, padding=(1, 1)), b1))
    out = nn.relu(nn.add(nn.conv2d(y, w2, padding=(1, 1)), y))
    params = {"w1": (RNG.standard_normal((32, 32, 3, 3)) * 0.2).astype("float32"),
              "b1": RNG.standard_normal(32).astype("float32"),
              "w2": (RNG.standard_normal((32, 32, 3, 3)) * 0.2).astype("float32")}
    return Function((x, w1, b1, w2), out), params


def _record(path, template: str, args: tuple, cost: float) -> None:
    task = autotvm.task.create(template, args, "llvm")
    space = task.config_space
    cfg = space.get(next(iter(space.sample_ints(1, np.random.default_rng(0)))))
    if template == "conv2d_NCHWc":  # the network's blocking, 16 channels in and out
        cfg = next(c for c in (space.get(i) for i in space.sample_ints(len(space),
                                                                      np.random.default_rng(1)))
                   if c["tile_ic"].size[-1] == c["tile_oc"].size[-1] == 16)
    with open(path, "a") as f:
        f.write(record.encode(MeasureInput(Target("llvm"), task, cfg),
                              MeasureResult((cost,), MeasureErrorNo.NO_ERROR, cost,
                                            time.time())) + "\n")


def _impls(log, graph_best=None, hw: int = 12) -> list[str]:
    """The implementations the network's groups ran under ``log``'s records (and inside them,
    the graph tuner's ``graph_best`` records), its output checked against the reference."""
    mod, params = _net(hw)
    x = RNG.standard_normal((1, 32, hw, hw)).astype(np.float32)
    inner = nullcontext() if graph_best is None else autotvm.apply_graph_best(str(graph_best))
    with autotvm.apply_history_best(str(log)), inner, PassContext(opt_level=3):
        lib = build(mod, "llvm", params)
    m = GraphModule(lib["default"]())
    m.run(data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.evaluate(mod, params, data=x),
                               rtol=1e-3, atol=1e-3)
    return [g.impl for g in lib.groups]


@pytest.mark.parametrize("winograd_cost, runs", [(1e-5, True), (1e-3, False), (None, False)])
def test_a_layer_runs_winograd_when_its_record_is_faster(tmp_path, winograd_cost, runs):
    log = tmp_path / "records.log"
    _record(log, "conv2d_NCHWc", ARGS, 1e-4)
    if winograd_cost is not None:
        _record(log, TEMPLATE, (*ARGS, 16, 16, 4), winograd_cost)
    impls = _impls(log)
    assert impls.count(f"autotvm:{TEMPLATE}") == (2 if runs else 0), impls
    # NOTE: one blocking through the network: no transform between the two convolutions
    assert impls.count("autotvm:conv2d_NCHWc") == (0 if runs else 2), impls


@pytest.mark.parametrize("hw", [12, 8])
def test_untuned_layers_run_winograd_on_larger_images(tmp_path, hw):
    """Without any record, a 3x3 stride-1 layer runs Winograd's fallback where its output has
    UNTUNED_MIN_PIXELS pixels or more (2-3.5x the direct fallback's speed there), else the
    direct fallback; both at the direct fallback's blocking, matching numpy."""
    from templtune.templates.x86.conv2d_nchwc_winograd import UNTUNED_MIN_PIXELS

    log = tmp_path / "empty.log"
    log.write_text("")
    impls = _impls(log, hw=hw)
    wino = hw * hw >= UNTUNED_MIN_PIXELS
    assert impls.count(f"autotvm:{TEMPLATE}") == (2 if wino else 0), impls
    assert impls.count("autotvm:conv2d_NCHWc") == (0 if wino else 2), impls
    call = OpCall("nn.contrib_conv2d_NCHWc", ((1, 2, hw, hw, 16), (2, 2, 3, 3, 16, 16)),
                  "float32", (1, 2, hw, hw, 16), {"strides": (1, 1), "padding": (1, 1)})
    with autotvm.apply_history_best(str(log)):
        chosen = strategy.select(call, Target("llvm"))
    assert chosen is not None and chosen.template == (TEMPLATE if wino else "conv2d_NCHWc")
    assert chosen.args[-1] == (4 if wino else chosen.args[-1])  # F(4x4) is the fallback


def test_a_graph_tuner_choice_runs_on_its_own_template(tmp_path):
    # the graph tuner chose direct configs; a faster Winograd record in the enclosing context
    # (as a packaged reference log can hold) must not take the layers, nor get their configs
    wino, chosen = tmp_path / "winograd.log", tmp_path / "graph_opt.log"
    _record(wino, TEMPLATE, (*ARGS, 16, 16, 4), 1e-6)
    for _ in range(2):  # one record per convolution, in order
        _record(chosen, "conv2d_NCHWc", ARGS, 1e-4)
    impls = _impls(wino, graph_best=chosen)
    assert impls.count("autotvm:conv2d_NCHWc") == 2, impls


def test_tune_network_gets_the_winograd_alternatives_at_the_chosen_blocking(tmp_path):
    from templtune.autotvm import env
    from templtune.graph import blocked_alternatives

    mod, params = _net()
    with env.scope(use_reference_logs=False):
        fallback = blocked_alternatives(mod, params, "llvm")
        log = tmp_path / "records.log"
        _record(log, "conv2d_NCHWc", ARGS, 1e-4)  # a 16-channel blocking
        with autotvm.apply_history_best(str(log)):
            tuned = blocked_alternatives(mod, params, "llvm")
    # both convolutions are one workload: one task per tile size
    assert sorted(t.args[-1] for t in fallback) == [2, 4]
    assert all(t.name == TEMPLATE and t.args[:9] == ARGS for t in fallback + tuned)
    assert {t.args[9:11] for t in tuned} == {(16, 16)}


# NOTE: blocking both layers costs 2 x 1e-4 s plus about 15 us of transforms (the plain
# input and output re-laid once each): a plain record slower than the blocked one can win
@pytest.mark.parametrize("plain_cost, plain", [(1.1e-4, False), (1.05e-4, True), (5e-5, True)])
def test_a_layer_stays_nchw_only_when_that_saves_more_than_the_transforms(tmp_path,
                                                                         plain_cost, plain):
    from templtune.graph.autotvm_integration import candidates

    mod, _ = _net()
    conv = mod.calls()[0]
    direct = next(c for c in candidates(conv) if c.name == "conv2d_nchw")
    log = tmp_path / "records.log"
    _record(log, "conv2d_NCHWc", ARGS, 1e-4)
    _record(log, direct.name, direct.args, plain_cost)
    impls = _impls(log)
    assert impls.count("autotvm:conv2d_nchw") == (2 if plain else 0), impls
