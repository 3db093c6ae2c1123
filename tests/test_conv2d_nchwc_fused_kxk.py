"""``conv2d_NCHWc`` register blocks that divide no row of a padded / KxK conv: an ungrouped
conv runs them over its fused output pixels (templates/x86/conv2d_nchwc_pixels.py), its full
blocks guard-free and a peeled partial last block (templtune/lower/partition.py)."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import hottest_loop
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data
from templtune.target import Target
from templtune.templates.x86.conv2d_nchwc import out_size, reduction_chunk
from templtune.templates.x86.conv2d_nchwc_registers import one_pass, register_vectors
from templtune.topi import testing as ref

HASWELL = "llvm -mcpu=haswell"


def _ow(args: tuple) -> int:
    _, _, w, _, _, _, kw, s, p = args
    return out_size(w, kw, p, p, s)


def _row_tail_configs(args: tuple, target: str) -> list:
    with Target(target):
        space = autotvm.task.create("conv2d_NCHWc", args, target).config_space
        return [space.get(i) for i in range(space.range_length)
                if space.is_index_valid(i) and _ow(args) % space.get(i)["tile_ow"].size[-1]]


def _build(args: tuple, cfg, target: str):
    task = autotvm.task.create("conv2d_NCHWc", args, target)
    with Target(target), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    return templtune.build(sch, tensors, target=target)


def _check(mod, args: tuple, cfg, rng: np.random.Generator) -> None:
    n, h, w, co, ci, kh, kw, s, p = args
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    expect = ref.conv2d_nchw_python(x, k, s, p)
    out = np.full((n, co // oc_bn, *expect.shape[2:], oc_bn), np.nan, np.float32)
    mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn), out.reshape(mod.params[-1].shape))
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-3, atol=1e-3, err_msg=str(cfg))


@pytest.mark.parametrize("target", [HASWELL, "llvm"])
@pytest.mark.parametrize("args", [
    (1, 14, 14, 32, 32, 3, 3, 2, 1),    # a ResNet 3x3 /2 conv's shape: rows of 7
    (1, 28, 28, 32, 16, 3, 3, 2, 1),    # rows of 14
    (1, 14, 14, 32, 16, 3, 3, 1, 1),    # stride 1
    (1, 11, 9, 32, 16, 5, 5, 1, 2),     # 5x5, odd sizes
    (1, 14, 14, 32, 512, 3, 3, 2, 1),   # chunked reduction
])
def test_row_tail_blocks_match_numpy(target, args):
    configs = _row_tail_configs(args, target)
    if target == HASWELL:
        assert configs, f"no row tail block in the AVX2 space of {args}"
    if not configs:
        pytest.skip(f"the host's space of {args} has no row tail block")
    if args[4] == 512:
        assert reduction_chunk(512, configs[0]["tile_ic"].size[-1],
                               configs[0]["tile_oc"].size[-1], 3, 3)
    rng = np.random.default_rng(0)
    for i in rng.choice(len(configs), min(3, len(configs)), replace=False):
        cfg = configs[int(i)]
        _check(_build(args, cfg, target), args, cfg, rng)


def test_avx2_row_tail_block_is_guard_free_fmas_in_registers():
    # 6 pixels x 2 ymm over 7x7 fused pixels: 12 accumulators in one pass, no spill, no guard
    args = (1, 14, 14, 32, 32, 3, 3, 2, 1)
    cfg = next(c for c in _row_tail_configs(args, HASWELL)
               if (c["tile_ow"].size[-1], c["tile_oc"].size[-1]) == (6, 16)
               and not c["unroll_kw"].val)
    loop = hottest_loop(_build(args, cfg, HASWELL).get_source("asm"))
    assert loop.fmas == 12 and loop.accumulators == 12 and loop.stack_accesses == 0


@pytest.mark.parametrize("ow, offered", [(7, {4, 5, 6}), (14, {4, 5, 6}), (28, {5, 6})])
def test_avx2_row_tails_offered_beside_row_blocks(ow, offered):
    # 16-channel blocks: every one-pass block with at least 8 chains that no row block matches
    # (the one-vector blocks' tails, up to 14 pixels, run as two passes of 16 channels)
    args = (1, 2 * ow, 2 * ow, 32, 16, 3, 3, 2, 1)
    got = {c["tile_ow"].size[-1] for c in _row_tail_configs(args, HASWELL)
           if c["tile_oc"].size[-1] == 16}
    assert {b for b in got if one_pass(b, 2, 14, 16)} == offered
    assert all(register_vectors(b, 2, 1, 16) == 1 for b in got - offered)


# A row of 7 takes two 7 x 1 passes (one broadcast per FMA), a row of 13 only latency-bound
# blocks (1 or 13 divide it, and 13 x 2 ymm do not fit): the fallback runs blocks of 5 over
# the fused pixels (row_steps: 98 cycles a step on 49 pixels against 103 for 6 or 4 pixels,
# whose tails are 1 and 1; 338 on 169 against 343).
@pytest.mark.parametrize("args, ow_bn", [((1, 14, 14, 64, 64, 3, 3, 2, 1), 5),
                                         ((1, 13, 13, 64, 64, 3, 3, 1, 1), 5)])
def test_avx2_fallback_row_blocks_of_kxk_convs(args, ow_bn):
    cfg = FallbackConfigEntity()
    mod = _build(args, cfg, HASWELL)
    assert (cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]) == (16, ow_bn)
    _check(mod, args, cfg, np.random.default_rng(3))
