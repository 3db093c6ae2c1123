"""``conv2d_NCHWc`` register blocks: what the space admits and what LLVM keeps in registers
(full AVX-512 blocks, the unrolled-kw filter against LLVM's spills, the fallback's blocks, and
wide blocks run in spill-free passes on AVX2 and AVX-512)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conv2d_nchwc_helpers import _entities

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import hottest_loop
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data
from templtune.target import Target, capabilities
from templtune.templates.x86._common import target_vector, vec_regs
from templtune.templates.x86.conv2d_nchwc import register_vectors
from templtune.topi import testing as ref

_ZMM_SPILL = re.compile(r"vmovups\s+%zmm\d+, -?\d*\(%rsp\)")


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
