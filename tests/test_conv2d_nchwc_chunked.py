"""``conv2d_NCHWc`` chunked reductions: 1x1 convs whose weights overflow L1 and KxK ones that
stream them match numpy, the chunk sizes, and chunked kernels that keep the unchunked register
block and apply a fused epilogue once."""

from __future__ import annotations

import numpy as np
import pytest
from conv2d_nchwc_helpers import _bias_residual_relu, _check_bias_residual_relu, _entities, _run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from templtune import autotvm
from templtune.target import capabilities
from templtune.templates.x86._common import register_file, target_vector


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


def test_reduction_chunk_keeps_a_chunk_in_half_of_l1_or_l2():
    from templtune.templates.x86.conv2d_nchwc import (
        L1_BYTES,
        STREAM_BYTES,
        band_rows,
        reduction_chunk,
    )

    assert reduction_chunk(2048, 32, 32, 1, 1) == 4  # 128 channels x 32 x 4 B = 16 KiB
    assert reduction_chunk(256, 32, 32, 1, 1) == 0  # 32 KiB of weights stay in L1
    # KxK: chunked only where a block's weights exceed STREAM_BYTES, a chunk's within half
    # of it, one input block at least
    assert reduction_chunk(512, 32, 32, 3, 3) == 2  # 576 KiB streamed, 2 x 36 KiB a chunk
    assert reduction_chunk(128, 32, 32, 3, 3) == 0  # 144 KiB stay in L2
    assert reduction_chunk(512, 16, 16, 3, 3) == 8  # 8 x 9 KiB within 128 KiB
    assert reduction_chunk(512, 64, 64, 3, 3) == 1  # one 144 KiB block
    for ci, ic_bn, oc_bn in [(512, 8, 16), (1024, 16, 32), (768, 48, 16)]:
        c = reduction_chunk(ci, ic_bn, oc_bn, 3, 3)
        assert c >= 1 and (ci // ic_bn) % c == 0
        assert c == 1 or c * ic_bn * oc_bn * 9 * 4 <= STREAM_BYTES // 2
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


def test_chunked_bands_share_few_blocks_among_the_threads():
    """Three output-channel blocks of a 14x14 map run in bands of 7 rows on 2 cores: 6
    parallel iterations instead of 3 (one of the threads idle a third of the time), one band
    of 14 rows on 1 core; the kernel still matches numpy."""
    import re

    import templtune
    from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data
    from templtune.target import Target
    from templtune.templates.x86.conv2d_nchwc import band_rows
    from templtune.topi import testing as ref

    assert band_rows(14, 14, 3, 2) == 7 and band_rows(14, 14, 3, 1) == 14
    assert band_rows(7, 7, 5, 2) == 1 and band_rows(7, 7, 16, 2) == 7
    assert band_rows(56, 56, 4, 2) == 4 and band_rows(14, 14, 3, 4) == 1
    args = (1, 14, 14, 3 * 32, 576, 1, 1, 1, 0)
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    cfg = _entities(32, 32, 14, False)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 576, 14, 14)).astype(np.float32)
    k = rng.standard_normal((96, 576, 1, 1)).astype(np.float32)
    for cores, extent in ((2, 6), (1, 3)):
        with Target(f"llvm -num-cores={cores}"), autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
        ir = str(templtune.lower(sch, tensors, simple_mode=True))
        assert re.findall(r"for \(\S+: int32, 0, (\d+)\) \"parallel\"", ir) == [str(extent)]
        out = np.full((1, 3, 14, 14, 32), np.nan, np.float32)
        templtune.build(sch, tensors, target="llvm")(pack_data(x, 32), pack_kernel(k, 32, 32), out)
        np.testing.assert_allclose(unpack_data(out), ref.conv2d_nchw_python(x, k, 1, 0),
                                   rtol=1e-3, atol=1e-3)
