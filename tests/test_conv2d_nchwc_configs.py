"""The x86 ``conv2d_NCHWc`` template: random legal configs of random workloads match numpy, its
blocks fit the capability record's vector registers, the inner loop is broadcast FMAs without
spills, and a fused bias / residual / relu epilogue matches numpy."""

from __future__ import annotations

import re

import numpy as np
from conv2d_nchwc_helpers import _bias_residual_relu, _check_bias_residual_relu, _run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import hottest_loop
from templtune.target import Target, capabilities
from templtune.templates.x86._common import register_file, target_vector, vec_regs
from templtune.templates.x86.conv2d_nchwc import register_vectors
from templtune.templates.x86.conv2d_nchwc_registers import one_pass


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
    vecs, acc = vec_regs(oc_bn, lanes), target_vector()[1]
    # a 7-pixel row takes all 7 pixels where they run in one pass (7 x 2 zmm); where the
    # weights would not fit beside them (7 x 2 ymm) a 5-pixel block over the fused 49 pixels
    # does (9 x 5 + 4: fewer cycles a reduction step than 8 x 6 + 1)
    assert ow_bn == (7 if one_pass(7, vecs, acc, register_file()) else 5)
    assert ow_bn * vec_regs(oc_bn, lanes) <= acc


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


def test_fused_epilogue_bias_residual_relu():
    args = (1, 6, 7, 32, 16, 3, 3, 1, 1)
    mod, ic_bn, oc_bn = _bias_residual_relu(args, FallbackConfigEntity())
    _check_bias_residual_relu(mod, args, ic_bn, oc_bn, seed=3)
