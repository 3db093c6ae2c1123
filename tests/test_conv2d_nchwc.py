"""The x86 ``conv2d_NCHWc`` template: random legal configs of random workloads match numpy, and
its blocks fit the capability record's vector registers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import hottest_loop
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data
from templtune.target import Target, capabilities
from templtune.templates.x86._common import register_file, target_vector, vec_regs
from templtune.templates.x86.conv2d_nchwc import register_vectors
from templtune.topi import testing as ref


def _run(args: tuple, cfg, rng: np.random.Generator) -> None:
    n, h, w, co, ci, kh, kw, s, p = args
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    mod = templtune.build(sch, tensors, target="llvm")
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    expect = ref.conv2d_nchw_python(x, k, s, p)
    out = np.zeros((n, co // oc_bn, *expect.shape[2:], oc_bn), np.float32)
    # a pointwise conv over fused pixels declares its output as [n, co/oc_bn, oh*ow, oc_bn]
    mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn),
        out.reshape(tuple(int(d) for d in tensors[2].shape)))
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-3, atol=1e-3, err_msg=str(cfg))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ci=st.sampled_from([3, 8, 16, 24]), co=st.sampled_from([8, 16, 32]),
       hw=st.integers(3, 9), k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]),
       pad=st.integers(0, 1), pick=st.integers(0, 10 ** 6))
def test_random_configs_match_numpy(ci, co, hw, k, stride, pad, pick):
    args = (1, hw, hw + 1, co, ci, k, k, stride, pad)
    space = autotvm.task.create("conv2d_NCHWc", args, "llvm").config_space
    idx = space.get_rand_index(rng=np.random.default_rng(pick))
    _run(args, space.get(idx), np.random.default_rng(pick))


def test_fallback_matches_numpy_and_fills_registers():
    args = (1, 7, 7, 64, 32, 3, 3, 1, 1)
    cfg = FallbackConfigEntity()
    _run(args, cfg, np.random.default_rng(0))
    caps = capabilities("llvm")
    lanes = caps.lanes("float32")
    oc_bn, ow_bn = cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]
    assert oc_bn % lanes == 0
    # a 7-pixel row takes all 7 pixels (the register file's accumulators, in passes of
    # fewer vectors where the weights would not fit beside them)
    assert ow_bn == 7
    assert ow_bn * vec_regs(oc_bn, lanes) <= target_vector()[1]


def test_space_keeps_accumulators_in_registers():
    task = autotvm.task.create("conv2d_NCHWc", (1, 14, 14, 64, 64, 3, 3, 1, 1), "llvm")
    lanes, regs = target_vector()
    space = task.config_space
    assert {"tile_ic", "tile_oc", "tile_ow", "unroll_kw"} <= set(space.space_map)
    for i in space.sample_ints(30, rng=np.random.default_rng(1)):
        cfg = space.get(int(i))
        ow_bn, vecs = cfg["tile_ow"].size[-1], vec_regs(cfg["tile_oc"].size[-1], lanes)
        # a single-tap block runs in passes of register_vectors vectors: a pass's count
        taps = 3 if cfg["unroll_kw"].val else 1
        assert ow_bn * register_vectors(ow_bn, vecs, taps, register_file()) <= regs


def test_inner_loop_is_broadcast_fma_without_spills():
    args = (1, 7, 7, 64, 32, 3, 3, 1, 1)
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(FallbackConfigEntity()):
        sch, tensors = task.func(*args)
    asm = templtune.build(sch, tensors, target="llvm").get_source("asm")
    vec = "zmm" if capabilities("llvm").vector_bits == 512 else "ymm"
    # the 7-pixel row in registers: 7 x 1 ymm per pass with AVX2, 7 x 2 zmm with AVX-512
    loop = hottest_loop(asm)
    assert loop.accumulators >= 7 and loop.stack_accesses == 0
    assert len(re.findall(rf"vfmadd\d+ps\s[^\n]*%{vec}", asm)) >= 7
    assert re.search(rf"vbroadcastss\s[^\n]*%{vec}|\{{1to\d+\}}", asm)
    assert not re.search(rf"vmovups\s+%{vec}\d+, -?\d*\(%rsp\)", asm)


def _bias_residual_relu(args: tuple, cfg) -> tuple:
    """``(module, ic_bn, oc_bn)``: ``cfg``'s kernel of ``args`` with a fused bias, residual add
    and relu."""
    from templtune import topi
    from templtune.autotvm.epilogue import Epilogue, EpilogueInput

    n, h, w, co, ci, kh, kw, s, p = args
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        task.func(*args)
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    out_shape = (n, co // oc_bn, oh, ow, oc_bn)
    ep = Epilogue((EpilogueInput((1, co // oc_bn, 1, 1, oc_bn)), EpilogueInput(out_shape)),
                  lambda out, ins: topi.nn.relu(topi.add(topi.add(out, ins[0]), ins[1])),
                  "bias_add_relu")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args, epilogue=ep)
    assert len(tensors) == 5
    return templtune.build(sch, tensors, target="llvm"), ic_bn, oc_bn


def _check_bias_residual_relu(mod, args: tuple, ic_bn: int, oc_bn: int, seed: int) -> None:
    """Run ``mod`` (from :func:`_bias_residual_relu`) on random inputs against numpy."""
    from templtune.graph.ops.nchwc import pack_bias

    n, h, w, co, ci, kh, kw, s, p = args
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    conv = ref.conv2d_nchw_python(x, k, s, p)
    r = rng.standard_normal(conv.shape).astype(np.float32)
    expect = np.maximum(conv + b[None, :, None, None] + r, 0)
    out = np.zeros((n, co // oc_bn, *conv.shape[2:], oc_bn), np.float32)
    mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn), pack_bias(b, oc_bn),
        pack_data(r, oc_bn), out)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-3, atol=1e-3)


def test_fused_epilogue_bias_residual_relu():
    args = (1, 6, 7, 32, 16, 3, 3, 1, 1)
    mod, ic_bn, oc_bn = _bias_residual_relu(args, FallbackConfigEntity())
    _check_bias_residual_relu(mod, args, ic_bn, oc_bn, seed=3)


# ---- register blocks: what the space admits and what LLVM keeps in registers -------------------
_ZMM_SPILL = re.compile(r"vmovups\s+%zmm\d+, -?\d*\(%rsp\)")


def _entities(ic: int, oc: int, ow: int, unroll: bool) -> dict:
    from templtune.autotvm.space import ConfigEntity

    return ConfigEntity.from_json_dict({"index": 0, "entity": [
        ["tile_ic", "sp", [-1, ic]], ["tile_oc", "sp", [-1, oc]], ["tile_ow", "sp", [-1, ow]],
        ["unroll_kw", "ot", unroll]]})


def _admitted(space, cfg) -> bool:
    def point(c) -> tuple:
        return tuple(c[k].size[-1] for k in ("tile_ic", "tile_oc", "tile_ow")) + (
            c["unroll_kw"].val,)

    want = point(cfg)
    return any(point(space.get(i)) == want for i in range(space.range_length)
               if space.is_index_valid(i))


def _zmm_spills(args: tuple, cfg) -> int:
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    return len(_ZMM_SPILL.findall(templtune.build(sch, tensors, target="llvm")
                                  .get_source("asm")))


@pytest.mark.skipif(capabilities("llvm").vector_bits != 512, reason="AVX-512 register blocks")
def test_space_admits_full_blocks_and_rejects_short_chains():
    task = autotvm.task.create("conv2d_NCHWc", (1, 8, 56, 64, 64, 3, 3, 1, 1), "llvm")
    space = task.config_space
    lanes, regs = target_vector()
    # 2 zmm x 14 pixels and 4 zmm x 7 pixels fill the 28 accumulators; 2 x 7 with kw unrolled
    for ic, oc, ow, unroll in ((32, 32, 14, False), (64, 64, 7, False), (32, 32, 7, True),
                               (16, 16, 28, False)):
        assert _admitted(space, _entities(ic, oc, ow, unroll)), (ic, oc, ow, unroll)
    for i in range(space.range_length):
        if space.is_index_valid(i):
            c = space.get(i)
            assert c["tile_ow"].size[-1] * vec_regs(c["tile_oc"].size[-1], lanes) >= regs // 2


@pytest.mark.slow
@pytest.mark.skipif(capabilities("llvm").vector_bits != 512, reason="AVX-512 register blocks")
def test_unroll_kw_filter_matches_llvm_spills():
    """The space drops exactly the unrolled-kw blocks whose inner body LLVM spills."""
    args = (1, 8, 56, 64, 64, 3, 3, 1, 1)
    space = autotvm.task.create("conv2d_NCHWc", args, "llvm").config_space
    for ic, oc, ow in ((32, 32, 14), (64, 64, 7), (16, 16, 28), (32, 32, 8), (64, 64, 4),
                       (16, 16, 14), (32, 32, 7)):
        cfg = _entities(ic, oc, ow, True)
        admitted, spills = _admitted(space, cfg), _zmm_spills(args, cfg)
        assert admitted == (spills == 0), (ic, oc, ow, admitted, spills)


@pytest.mark.skipif(capabilities("llvm").vector_bits != 512, reason="AVX-512 fallback blocks")
def test_fallback_unrolls_kw_only_where_it_fits():
    for args, ow_bn, unroll in (((1, 56, 56, 64, 64, 3, 3, 1, 1), 14, False),
                                ((1, 7, 7, 512, 512, 3, 3, 1, 1), 7, True)):
        cfg = FallbackConfigEntity()
        task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
        with Target("llvm"), autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
        assert (cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]) == (32, ow_bn)
        assert cfg["unroll_kw"].val is unroll
        assert _admitted(task.config_space, cfg)
        asm = templtune.build(sch, tensors, target="llvm").get_source("asm")
        assert not _ZMM_SPILL.search(asm)


@pytest.mark.parametrize("target,ow,oc,passes", [
    ("llvm -mcpu=haswell", 7, 16, 2), ("llvm -mcpu=haswell", 14, 8, 1),
    ("llvm -mcpu=haswell", 4, 16, 1), ("llvm -mcpu=skylake-avx512", 7, 64, 2),
    ("llvm -mcpu=skylake-avx512", 3, 128, 2), ("llvm -mcpu=skylake-avx512", 14, 32, 1)])
def test_wide_blocks_run_in_passes_without_spills(target, ow, oc, passes):
    """A single-tap block whose weight vectors do not fit beside its accumulators (7 x 2 ymm:
    14 + 2 + 1 registers of 16) is computed in narrower passes: LLVM's inner loop holds one
    pass's accumulators and touches no stack slot. Compiled for both ISAs on any host; the
    AVX2 kernel is also run against numpy (every x86-64 host with AVX-512 runs AVX2 code)."""
    t = Target(target)
    caps = capabilities(t)
    lanes = caps.lanes("float32")
    assert register_vectors(ow, oc // lanes, 1, caps.vector_registers) == oc // lanes // passes
    assert register_vectors(ow, oc // lanes, 3, caps.vector_registers) == oc // lanes
    args = (1, 7, 2 * ow, 2 * oc, 64, 3, 3, 1, 1)
    cfg = _entities(16, oc, ow, False)
    task = autotvm.task.create("conv2d_NCHWc", args, t)
    with t, autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    mod = templtune.build(sch, tensors, target=t)
    loop = hottest_loop(mod.get_source("asm"))
    assert loop.accumulators == ow * oc // lanes // passes and loop.stack_accesses == 0, loop
    if lanes == 8 and capabilities("llvm").vector_bits >= 256:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, 64, 7, 2 * ow)).astype(np.float32)
        k = rng.standard_normal((2 * oc, 64, 3, 3)).astype(np.float32)
        out = np.zeros(tuple(int(d) for d in tensors[2].shape), np.float32)
        mod(pack_data(x, 16), pack_kernel(k, 16, oc), out)
        np.testing.assert_allclose(unpack_data(out), ref.conv2d_nchw_python(x, k, 1, 1),
                                   rtol=1e-3, atol=1e-3)


# ---- chunked reductions: 1x1 convs whose weights overflow L1, KxK ones that stream them -------
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ci=st.sampled_from([256, 512]), co=st.sampled_from([32, 64]), hw=st.integers(3, 9),
       stride=st.sampled_from([1, 2]), pick=st.integers(0, 10 ** 6))
def test_chunked_configs_match_numpy(ci, co, hw, stride, pick):
    from templtune.templates.x86.conv2d_nchwc import reduction_chunk

    args = (1, hw, hw + 1, co, ci, 1, 1, stride, 0)
    space = autotvm.task.create("conv2d_NCHWc", args, "llvm").config_space
    cfg = space.get(space.get_rand_index(rng=np.random.default_rng(pick)))
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    chunked = reduction_chunk(ci, ic_bn, oc_bn, 1, 1)
    assert chunked or ci * oc_bn * 4 <= 32 * 1024
    _run(args, cfg, np.random.default_rng(pick))


def test_reduction_chunk_keeps_a_chunk_in_half_of_l1():
    from templtune.templates.x86.conv2d_nchwc import L1_BYTES, band_rows, reduction_chunk

    assert reduction_chunk(2048, 32, 32, 1, 1) == 4  # 128 channels x 32 x 4 B = 16 KiB
    assert reduction_chunk(256, 32, 32, 1, 1) == 0  # 32 KiB of weights stay in L1
    # KxK: chunked only where a block's weights exceed STREAM_BYTES, one input block at least
    assert reduction_chunk(512, 32, 32, 3, 3) == 1  # 576 KiB streamed
    assert reduction_chunk(128, 32, 32, 3, 3) == 0  # 144 KiB stay in L2
    assert reduction_chunk(512, 8, 16, 3, 3) == 2  # 2 x 4.5 KiB within half of L1
    for ci, ic_bn, oc_bn in [(512, 16, 64), (1024, 8, 32), (768, 48, 16), (4096, 64, 64)]:
        c = reduction_chunk(ci, ic_bn, oc_bn, 1, 1)
        assert c >= 1 and (ci // ic_bn) % c == 0
        assert c == 1 or c * ic_bn * oc_bn * 4 <= L1_BYTES // 2
    assert band_rows(7, 7) == 7 and band_rows(56, 56) == 4 and band_rows(13, 300) == 1


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(co=st.sampled_from([32, 64]), hw=st.integers(3, 8), stride=st.sampled_from([1, 2]),
       pick=st.integers(0, 10 ** 6))
def test_chunked_kxk_configs_match_numpy(co, hw, stride, pick):
    from templtune.templates.x86.conv2d_nchwc import STREAM_BYTES, reduction_chunk

    args = (1, hw, hw + 1, co, 512, 3, 3, stride, 1)
    space = autotvm.task.create("conv2d_NCHWc", args, "llvm").config_space
    cfg = space.get(space.get_rand_index(rng=np.random.default_rng(pick)))
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    assert bool(reduction_chunk(512, ic_bn, oc_bn, 3, 3)) == (512 * 9 * oc_bn * 4 > STREAM_BYTES)
    _run(args, cfg, np.random.default_rng(pick))


def _row_block() -> tuple[int, int]:
    """``(oc_bn, vecs)`` of a 7-pixel register block that LLVM keeps in the host's registers
    with its weight vectors and a broadcast: two vectors of channels with AVX-512, one with
    AVX2 (7 x 2 accumulators + 2 weights + 1 broadcast overflow 16 ymm)."""
    vecs = 2 if 7 * 2 + 2 + 1 <= register_file() else 1
    return vecs * capabilities("llvm").lanes("float32"), vecs


@pytest.mark.parametrize("unroll", [True, False])
def test_chunked_kxk_epilogue_and_registers(unroll):
    """A chunked 3x3 conv keeps the unchunked micro-kernel: 7 pixels x ``vecs`` registers of
    accumulators, the kw taps unrolled around them where they fit, no spills; the epilogue is
    applied once."""
    from templtune.codegen.llvm.asm_loops import hottest_loop
    from templtune.templates.x86.conv2d_nchwc import reduction_chunk, spill_free

    oc_bn, vecs = _row_block()
    if unroll and not spill_free(7, vecs, 3, target_vector()[1], register_file()):
        pytest.skip("the unrolled taps do not fit this host's registers beside the block")
    args = (1, 7, 7, 2 * oc_bn, 2048, 3, 3, 1, 1)
    assert reduction_chunk(2048, oc_bn, oc_bn, 3, 3)
    mod, ic_bn, _ = _bias_residual_relu(args, _entities(oc_bn, oc_bn, 7, unroll))
    loop = hottest_loop(mod.get_source("asm"))
    taps = 3 if unroll else 1
    assert loop.fmas == taps * 7 * vecs and loop.accumulators == 7 * vecs
    assert loop.stack_accesses == 0
    _check_bias_residual_relu(mod, args, ic_bn, oc_bn, seed=5)


def test_chunked_epilogue_and_registers():
    from templtune.codegen.llvm.asm_loops import hottest_loop
    from templtune.templates.x86.conv2d_nchwc import reduction_chunk

    oc_bn, vecs = _row_block()
    args = (1, 7, 7, 2 * oc_bn, 2048, 1, 1, 1, 0)
    assert reduction_chunk(2048, oc_bn, oc_bn, 1, 1)
    mod, ic_bn, _ = _bias_residual_relu(args, _entities(oc_bn, oc_bn, 7, False))
    loop = hottest_loop(mod.get_source("asm"))
    assert loop.fmas == 7 * vecs and loop.accumulators == 7 * vecs and loop.stack_accesses == 0
    _check_bias_residual_relu(mod, args, ic_bn, oc_bn, seed=4)


# ---- pointwise convs over fused pixels (register blocks that divide no row) ------------------
def _tail_configs(args: tuple, target: str) -> list:
    with Target(target):
        space = autotvm.task.create("conv2d_NCHWc", args, target).config_space
        ow = (args[2] - 1) // args[7] + 1
        return [space.get(i) for i in range(space.range_length)
                if space.is_index_valid(i) and ow % space.get(i)["tile_ow"].size[-1]]


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm"])
@pytest.mark.parametrize("args", [(1, 7, 7, 64, 32, 1, 1, 1, 0), (1, 14, 14, 64, 32, 1, 1, 1, 0),
                                  (1, 14, 14, 64, 32, 1, 1, 2, 0),  # strided: reads skip
                                  (1, 7, 7, 32, 1024, 1, 1, 1, 0),  # chunked
                                  (1, 13, 13, 32, 1024, 1, 1, 2, 0)])  # both, odd input
def test_pointwise_tail_blocks_match_numpy(target, args):
    configs = _tail_configs(args, target)
    assert configs, f"no tail block in the {target} space of {args}"
    rng = np.random.default_rng(0)
    n, h, w, co, ci, stride = *args[:5], args[7]
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    task = autotvm.task.create("conv2d_NCHWc", args, target)
    for cfg in [configs[int(i)] for i in rng.choice(len(configs), min(3, len(configs)), False)]:
        with Target(target), autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
        ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
        assert tuple(int(d) for d in tensors[2].shape) == (n, co // oc_bn, oh * ow, oc_bn)
        mod = templtune.build(sch, tensors, target=target)
        x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
        k = rng.standard_normal((co, ci, 1, 1)).astype(np.float32)
        out = np.zeros((n, co // oc_bn, oh, ow, oc_bn), np.float32)
        mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn), out.reshape(-1, oh * ow, oc_bn)[None])
        np.testing.assert_allclose(unpack_data(out), ref.conv2d_nchw_python(x, k, stride, 0),
                                   rtol=1e-3, atol=1e-3, err_msg=str(cfg))


def test_avx2_fallback_blocks_a_7x7_pointwise_conv_as_6_pixels_in_one_pass():
    # 7 pixels x 2 ymm would need two 7 x 1 passes (one broadcast per FMA)
    args = (1, 7, 7, 64, 32, 1, 1, 1, 0)
    cfg = FallbackConfigEntity()
    with Target("llvm -mcpu=haswell"), autotvm.ApplyConfig(cfg):
        autotvm.task.create("conv2d_NCHWc", args, "llvm -mcpu=haswell").func(*args)
    assert (cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]) == (16, 6)
    assert register_vectors(6, 2, 1, 16) == 2


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm"])
def test_a_network_runs_tail_blocks_with_their_epilogues(target):
    from templtune.graph import nn, reference
    from templtune.graph.build import build
    from templtune.graph.executor import GraphModule
    from templtune.graph.ir import Function
    from templtune.graph.transform import PassContext

    # a bottleneck's pointwise convs: a strided one into a residual add, the 7x7 ones after
    data = nn.var("data", (1, 32, 14, 14))
    w1, b1, w2 = nn.var("w1", (64, 32, 1, 1)), nn.var("b1", (64,)), nn.var("w2", (32, 64, 1, 1))
    w3 = nn.var("w3", (32, 32, 1, 1))
    h = nn.relu(nn.bias_add(nn.conv2d(data, w1, strides=(2, 2)), b1))
    f = Function((data, w1, b1, w2, w3),
                 nn.relu(nn.add(nn.conv2d(h, w2), nn.conv2d(data, w3, strides=(2, 2)))),
                 name="pointwise")
    rng = np.random.default_rng(1)
    params = {"w1": rng.standard_normal((64, 32, 1, 1)).astype(np.float32),
              "b1": rng.standard_normal(64).astype(np.float32),
              "w2": rng.standard_normal((32, 64, 1, 1)).astype(np.float32),
              "w3": rng.standard_normal((32, 32, 1, 1)).astype(np.float32)}
    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    with PassContext(opt_level=3):
        lib = build(f, target, params)
    m = GraphModule(lib["default"]())
    m.run(data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.evaluate(f, params, data=x),
                               rtol=1e-4, atol=1e-4)
    groups = [(g.impl, [c.op for c in g.group.calls]) for g in lib.groups]
    assert sum(impl == "autotvm:conv2d_NCHWc" for impl, _ in groups) == 3
    # bias, residual add and relu run inside the convs' kernels
    assert all(impl == "autotvm:conv2d_NCHWc" for impl, ops in groups
               if "add" in ops or "nn.relu" in ops), groups
