"""The x86 ``depthwise_conv2d_NCHWc`` template: random legal configs of random workloads match
numpy, every config keeps the graph's channel block, the register blocks fit the capability
record, and ``relay.build`` runs the network's blocked depthwise convolutions with it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.graph.ops.nchwc import pack_data, pack_depthwise_kernel, unpack_data
from templtune.target import Target, capabilities
from templtune.templates import load
from templtune.templates.x86._common import target_vector, vec_regs
from templtune.topi import testing as ref

load("x86")
NAME = "depthwise_conv2d_NCHWc"


def _build(args: tuple, cfg, epilogue=None):
    task = autotvm.task.create(NAME, args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        extra = {} if epilogue is None else {"epilogue": epilogue}
        sch, tensors = task.func(*args, **extra)
    return templtune.build(sch, tensors, target="llvm"), tensors


def _run(args: tuple, cfg, rng: np.random.Generator) -> None:
    n, h, w, c, kh, kw, s, p, b = args
    mod, tensors = _build(args, cfg)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    k = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    expect = ref.conv2d_nchw_python(x, k, s, p, groups=c)
    out = np.zeros(tuple(int(d) for d in tensors[-1].shape), np.float32)
    assert out.shape[1] * out.shape[-1] == c and out.shape[-1] == b  # the graph's blocking
    mod(pack_data(x, b), pack_depthwise_kernel(k, b), out)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=st.sampled_from([8, 16, 32, 64]), chunks=st.integers(1, 2), h=st.integers(3, 9),
       w=st.integers(3, 11), k=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]),
       pad=st.sampled_from([0, 1, (0, 1, 2, 1)]), pick=st.integers(0, 10 ** 6))
def test_random_configs_match_numpy(block, chunks, h, w, k, stride, pad, pick):
    if k > min(h, w):
        k = 1
    args = (1, h, w, block * chunks, k, k, stride, pad, block)
    space = autotvm.task.create(NAME, args, "llvm").config_space
    idx = space.get_rand_index(rng=np.random.default_rng(pick))
    _run(args, space.get(idx), np.random.default_rng(pick))


@pytest.mark.parametrize("args", [(1, 14, 14, 64, 3, 3, 1, 1, 32), (1, 15, 13, 48, 3, 3, 2, 1, 16),
                                  (2, 7, 7, 128, 3, 3, 1, 1, 64)])
def test_fallback_matches_numpy_and_is_in_the_space(args):
    cfg = FallbackConfigEntity()
    _run(args, cfg, np.random.default_rng(0))
    space = autotvm.task.create(NAME, args, "llvm").config_space
    point = tuple(cfg[k].size[-1] for k in ("tile_ow", "tile_oh", "tile_c"))
    assert point in {tuple(space.get(i)[k].size[-1] for k in ("tile_ow", "tile_oh", "tile_c"))
                     for i in range(space.range_length) if space.is_index_valid(i)}


def test_space_keeps_the_block_and_accumulators_in_registers():
    args = (1, 112, 112, 64, 3, 3, 1, 1, 32)
    space = autotvm.task.create(NAME, args, "llvm").config_space
    lanes, regs = target_vector()
    assert set(space.space_map) == {"tile_ow", "tile_oh", "tile_c"}
    # small enough for a grid search within a 64-trial budget
    assert 8 <= len(space) <= 64
    for i in range(space.range_length):
        if not space.is_index_valid(i):
            continue
        cfg = space.get(i)
        ow_bn, oh_bn, c_bn = (cfg[k].size[-1] for k in ("tile_ow", "tile_oh", "tile_c"))
        assert 32 % c_bn == 0 and (c_bn % lanes == 0 or c_bn == 32)
        assert 8 <= oh_bn * ow_bn * vec_regs(c_bn, lanes) <= regs


def test_block_must_divide_channels():
    with pytest.raises(ValueError, match="block 32 does not divide the 48 channels"):
        autotvm.task.create(NAME, (1, 8, 8, 48, 3, 3, 1, 1, 32), "llvm")


def test_inner_block_is_fma_with_masked_border_loads_and_no_spills():
    mod, _ = _build((1, 14, 14, 64, 3, 3, 1, 1, 32), FallbackConfigEntity())
    asm = mod.get_source("asm")
    vec = "zmm" if capabilities("llvm").vector_bits == 512 else "ymm"
    assert len(re.findall(rf"vfmadd\d+ps\s[^\n]*%{vec}", asm)) >= 9 * 8
    assert not re.search(rf"vmovups\s+%{vec}\d+, -?\d*\(%rsp\)", asm)
    assert "data_pad" not in str(templtune.lower(*_lowered((1, 14, 14, 64, 3, 3, 1, 1, 32))))


def _lowered(args):
    task = autotvm.task.create(NAME, args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(FallbackConfigEntity()):
        return task.func(*args)


def test_fused_bias_relu_epilogue():
    from templtune import topi
    from templtune.autotvm.epilogue import Epilogue, EpilogueInput
    from templtune.graph.ops.nchwc import pack_bias

    args = (1, 9, 10, 64, 3, 3, 2, 1, 16)
    out_shape = (1, 4, 5, 5, 16)
    ep = Epilogue((EpilogueInput((1, 4, 1, 1, 16)),),
                  lambda out, ins: topi.nn.relu(topi.add(out, ins[0])), "bias_relu")
    mod, tensors = _build(args, FallbackConfigEntity(), ep)
    assert len(tensors) == 4
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 64, 9, 10)).astype(np.float32)
    k = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    expect = np.maximum(ref.conv2d_nchw_python(x, k, 2, 1, groups=64)
                        + bias[None, :, None, None], 0)
    out = np.zeros(out_shape, np.float32)
    mod(pack_data(x, 16), pack_depthwise_kernel(k, 16), pack_bias(bias, 16), out)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-4, atol=1e-4)


# ---- the network: relay.build picks the template for the blocked depthwise convolutions --------
def _separable(channels: int = 32, hw: int = 12):
    from templtune.graph import nn
    from templtune.graph.ir import Function

    rng = np.random.default_rng(1)
    x = nn.var("data", (1, 8, hw, hw))
    params = {"w0": rng.standard_normal((channels, 8, 1, 1)).astype(np.float32),
              "b0": rng.standard_normal(channels).astype(np.float32),
              "dw": rng.standard_normal((channels, 1, 3, 3)).astype(np.float32),
              "b1": rng.standard_normal(channels).astype(np.float32),
              "w2": rng.standard_normal((16, channels, 1, 1)).astype(np.float32)}
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    y = nn.relu(nn.bias_add(nn.conv2d(x, v["w0"]), v["b0"]))
    y = nn.conv2d(y, v["dw"], strides=(2, 2), padding=(1, 1), groups=channels)
    y = nn.clip(nn.bias_add(y, v["b1"]), 0.0, 6.0)
    y = nn.conv2d(y, v["w2"])
    return Function((x, *v.values()), y), params


def test_relay_build_runs_the_template_with_its_epilogue():
    from templtune.graph import reference
    from templtune.graph.build import build
    from templtune.graph.executor import GraphModule
    from templtune.graph.transform import PassContext

    mod, params = _separable()
    with PassContext(opt_level=3):
        lib = build(mod, "llvm", params)
    groups = [g for g in lib.groups if g.group.calls[0].op == "nn.contrib_depthwise_conv2d_NCHWc"]
    assert len(groups) == 1 and groups[0].impl == f"autotvm:{NAME}"
    # bias and clip computed in the template's output stage: one kernel for the group
    assert [c.op for c in groups[0].group.calls][1:] == ["add", "clip"]
    assert len(groups[0].steps) == 1
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 12)).astype(np.float32)
    m = GraphModule(lib["default"]())
    m.run(data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.evaluate(mod, params, data=x),
                               rtol=1e-4, atol=1e-4)


def test_extraction_gives_the_depthwise_task_at_the_network_blocking():
    mod, params = _separable()
    tasks = autotvm.task.extract_from_program(mod, params, "llvm")
    dw = [t for t in tasks if t.name == NAME]
    assert len(dw) == 1
    conv = next(t for t in tasks if t.name == "conv2d_NCHWc" and t.args[4] == 8)
    cfg = FallbackConfigEntity()
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        conv.func(*conv.args)
    # the depthwise conv runs in the first conv's output blocking
    assert dw[0].args == (1, 12, 12, 32, 3, 3, 2, 1, cfg["tile_oc"].size[-1])


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"])
@pytest.mark.parametrize("args", [(1, 14, 14, 64, 3, 3, 1, 1, 32), (1, 7, 7, 64, 3, 3, 1, 1, 32),
                                  (1, 7, 7, 128, 3, 3, 1, 1, 64)])
def test_space_and_fallback_follow_the_target_isa(target, args):
    """An AVX2 target's space sizes blocks in ymm registers (8 lanes, 14 accumulators), an
    AVX-512 one's in zmm, wherever the space is built, and the fallback is one of its points;
    the AVX2 kernel runs here too."""
    lanes, regs = target_vector(target)
    task = autotvm.task.create(NAME, args, target)
    space = task.config_space
    cs = set()
    for i in range(space.range_length):
        if space.is_index_valid(i):
            cfg = space.get(i)
            c_bn = cfg["tile_c"].size[-1]
            cs.add(c_bn)
            assert _acc_regs(cfg, lanes) <= regs
    assert cs <= {c for c in range(lanes, args[-1] + 1, lanes) if args[-1] % c == 0}
    cfg = FallbackConfigEntity()
    with Target(target), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    assert _in_space(space, cfg) and _acc_regs(cfg, lanes) <= regs
    if "haswell" in target and args[1] == 14:
        mod = templtune.build(sch, tensors, target=target)
        rng = np.random.default_rng(4)
        x = rng.standard_normal((1, 64, 14, 14)).astype(np.float32)
        k = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
        out = np.zeros((1, 2, 14, 14, 32), np.float32)
        mod(pack_data(x, 32), pack_depthwise_kernel(k, 32), out)
        np.testing.assert_allclose(unpack_data(out), ref.conv2d_nchw_python(x, k, 1, 1, groups=64),
                                   rtol=1e-4, atol=1e-4)
        asm = mod.get_source("asm")
        assert "zmm" not in asm and re.search(r"vfmadd\d+ps\s[^\n]*%ymm", asm)


def _in_space(space, cfg) -> bool:
    """Whether ``cfg``'s block is a point of ``space``."""
    def point(c) -> tuple:
        return tuple(c[k].size[-1] for k in ("tile_ow", "tile_oh", "tile_c"))

    return point(cfg) in {point(space.get(i)) for i in range(space.range_length)
                          if space.is_index_valid(i)}


def _acc_regs(cfg, lanes: int) -> int:
    return (cfg["tile_oh"].size[-1] * cfg["tile_ow"].size[-1]
            * vec_regs(cfg["tile_c"].size[-1], lanes))
