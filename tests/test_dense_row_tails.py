"""Row blocks with a partial last block in ``dense`` and ``batch_matmul``
(templates/x86/row_blocks.py): the blocks no divisor of ``M`` reaches, peeled by lowering."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import autotvm
from templtune.autotvm.task.knobs import factor_splits
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import hottest_loop
from templtune.target import Target
from templtune.templates.x86.row_blocks import (
    fallback_rows,
    row_splits,
    tile_rows,
    wide_tile,
)

HASWELL = "llvm -mcpu=haswell"
SKYLAKE = "llvm -mcpu=skylake-avx512"
#: (template, args, numpy reference of its inputs)
CASES = {
    "dense": ((197, 64, 48), lambda a, b: a @ b.T),
    "batch_matmul": ((3, 50, 32, 24), lambda a, b: a @ b.transpose(0, 2, 1)),
}


#: the same templates with a prime row count above the 256-row tile limit (a ViT's 577 tokens)
WIDE = {"dense": (577, 32, 16), "batch_matmul": (2, 577, 16, 8)}


def _inputs(name: str, args: tuple) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "dense":
        m, n, k = args
        return rng.random((m, k), np.float32), rng.random((n, k), np.float32)
    b, m, n, k = args
    return rng.random((b, m, k), np.float32), rng.random((b, n, k), np.float32)


def _tail(cfg, m: int) -> bool:
    size = cfg["tile_y"].size
    return tile_rows(m, size) % size[-1] != 0


def _build(name: str, args: tuple, cfg, target: str):
    task = autotvm.task.create(name, args, target)
    with Target(target), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    return templtune.build(sch, tensors, target=target)


def _rows(name: str, args: tuple) -> int:
    return args[0] if name == "dense" else args[1]


def _check(name: str, args: tuple, cfg, target: str) -> None:
    a, b = _inputs(name, args)
    want = CASES[name][1](a, b)
    out = np.zeros(want.shape, np.float32)
    _build(name, args, cfg, target)(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@pytest.mark.parametrize("m", [1024, 197, 96, 49, 7])
@pytest.mark.parametrize("regs, widths", [(16, [1, 2, 4]), (32, [1, 2, 4])])
def test_row_splits_keep_every_exact_split_first(m, regs, widths):
    cands = row_splits(m, widths, regs, 16, 256)
    exact = factor_splits(m, 3)
    assert cands[:len(exact)] == exact
    for mo, mb, rb in cands[len(exact):]:
        t = m // mo
        assert m % mo == 0 and t <= 256 and t % rb and (mb - 1) * rb < t <= mb * rb


def test_power_of_two_rows_on_avx512_get_no_partial_blocks():
    # 8 x 2 zmm divides 1024 and taller blocks ran slower: the AVX-512 space is the exact one
    with Target(SKYLAKE):
        space = autotvm.task.create("dense", (1024, 1024, 1024), SKYLAKE).config_space
    assert all(-1 in e.size for e in space.space_map["tile_y"].entities)


def test_avx2_offers_six_row_blocks_for_1024_rows():
    with Target(HASWELL):
        space = autotvm.task.create("dense", (1024, 1024, 1024), HASWELL).config_space
    assert {e.size[-1] for e in space.space_map["tile_y"].entities if -1 not in e.size} >= {5, 6}


@pytest.mark.parametrize("target", [HASWELL, "llvm"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_partial_row_blocks_match_numpy(name, target):
    args = CASES[name][0]
    m = args[0] if name == "dense" else args[1]
    with Target(target):
        space = autotvm.task.create(name, args, target).config_space
        configs = [space.get(i) for i in range(space.range_length)
                   if space.is_index_valid(i) and _tail(space.get(i), m)]
    assert configs, f"no partial row block in the space of {name}{args}"
    rng = np.random.default_rng(1)
    for i in rng.choice(len(configs), min(3, len(configs)), replace=False):
        _check(name, args, configs[int(i)], target)


@pytest.mark.parametrize("target", [HASWELL, "llvm"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_prime_rows_fallback_blocks_rows(name, target):
    # 197 rows (or 50 = 2 x 25): the exact blocks have 1-2 rows; the fallback goes taller
    args = CASES[name][0]
    cfg = FallbackConfigEntity()
    _check(name, args, cfg, target)
    assert cfg["tile_y"].size[-1] >= 4


def test_fallback_rows_keeps_exact_blocks_with_enough_accumulators():
    assert fallback_rows(1024, 2, 32, 16, 256) == [128, 1, 8]   # AVX-512: 8 x 2 zmm
    assert fallback_rows(1024, 2, 16, 16, 256) == [16, 11, 6]   # AVX2: 64-row tiles of 6 + 4
    assert fallback_rows(197, 2, 32, 16, 256) == [1, 25, 8]


def test_avx2_partial_block_gemm_is_guard_free_fmas_in_registers():
    # 6 rows x 2 ymm: 12 accumulators in the peeled full blocks, no spill
    args = (1024, 64, 64)
    cfg = FallbackConfigEntity()
    mod = _build("dense", args, cfg, HASWELL)
    assert cfg["tile_y"].size[-1] == 6 and cfg["tile_x"].size[-1] == 16
    loop = hottest_loop(mod.get_source("asm"))
    assert loop.fmas % 12 == 0 and loop.accumulators == 12 and loop.stack_accesses == 0


def test_wide_tile_only_where_no_divisor_holds_sixteen_rows():
    assert wide_tile(577, 256) == 577 and wide_tile(1154, 256) == 577
    assert wide_tile(263 * 3, 256) == 263
    for m in (1024, 197, 49, 7, 1, 512 * 3):
        assert wide_tile(m, 256) is None


@pytest.mark.parametrize("target", [HASWELL, "llvm"])
@pytest.mark.parametrize("name", sorted(WIDE))
def test_prime_rows_above_the_tile_limit_get_tall_blocks(name, target):
    # 577 is prime and above the 256-row tile limit: only the wide tile has blocks taller than
    # one row. "llvm" is the host: AVX-512 code would not run on an AVX2 host.
    args = WIDE[name]
    m = _rows(name, args)
    with Target(target):
        space = autotvm.task.create(name, args, target).config_space
    heights = {e.size[-1] for e in space.space_map["tile_y"].entities}
    assert max(heights) >= 4
    cfg = FallbackConfigEntity()
    _check(name, args, cfg, target)
    assert cfg["tile_y"].size[-1] >= 4 and tile_rows(m, cfg["tile_y"].size) == m
    with Target(target):
        tall = [space.get(i) for i in range(space.range_length) if space.is_index_valid(i)
                and space.get(i)["tile_y"].size[-1] >= 4]
    for i in np.random.default_rng(2).choice(len(tall), min(2, len(tall)), replace=False):
        _check(name, args, tall[int(i)], target)
