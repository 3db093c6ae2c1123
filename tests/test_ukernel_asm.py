"""Register-blocked micro-kernels: the inner loop of the x86 templates' blocks, read back from
the assembly LLVM emits for the host and for an AVX2 and an AVX-512 CPU.

The inner loop of a good block is FMAs on full-width registers into enough accumulators to
cover the FMA latency, fed by broadcast and vector loads (or FMA memory operands), with
nothing going to the stack (no spills) and no shuffles.
"""

from __future__ import annotations

import pytest

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import AsmLoop, hottest_loop, loops
from templtune.target import Target, capabilities
from templtune.templates.x86._common import FMA_CHAINS, block_registers, vec_regs
from templtune.templates.x86.row_blocks import MAX_ACCUMULATORS

AVX2, AVX512 = "llvm -mcpu=znver3", "llvm -mcpu=znver4"
DENSE = (1024, 1024, 1024)
SEED = (1, 7, 7, 512, 512, 3, 3, 1, 1)
CONV56 = (1, 56, 56, 64, 64, 3, 3, 1, 1)


def _asm(name: str, args: tuple, target: str, cfg=None) -> str:
    task = autotvm.task.create(name, args, target)
    cfg = cfg if cfg is not None else FallbackConfigEntity()
    with Target(target), autotvm.ApplyConfig(cfg):
        s, bufs = task.func(*task.args)
    return templtune.build(s, bufs, target=target).get_source("asm")


def _clean(loop: AsmLoop, target: str, min_acc: int = FMA_CHAINS, lanes: int = 0) -> None:
    """``lanes``: the block's vector width when it is narrower than a register."""
    caps = capabilities(Target(target))
    bits = 32 * lanes if lanes and lanes < caps.lanes("float32") else caps.vector_bits
    assert loop.fma_width == {{512: "zmm", 256: "ymm"}[bits]}, loop
    assert loop.stack_accesses == 0 and loop.vector_stores == 0, f"spills: {loop}"
    assert loop.other_vector_ops == (), loop
    assert loop.accumulators >= min_acc, loop
    assert loop.fmas >= loop.accumulators
    # every FMA's other operand comes from a load (broadcast, vector load or memory operand)
    assert loop.broadcast_loads + loop.vector_loads + loop.fma_memory_operands > 0


ASM_SAMPLE = """\
\tvxorps\t%xmm0, %xmm0, %xmm0
.LBB0_1:
\tvmovups\t(%rsi), %zmm2
.LBB0_2:
\tvbroadcastss\t(%rdi,%rax,4), %zmm1
\tvfmadd231ps\t%zmm1, %zmm2, %zmm0
\tvfmadd231ps\t4(%rdi){1to16}, %zmm2, %zmm3
\tvmovaps\t%zmm4, -64(%rsp)
\tjne\t.LBB0_2
\tvfmadd231ps\t%zmm1, %zmm2, %zmm5
\tjne\t.LBB0_1
"""


def test_asm_reader_finds_the_inner_loop_and_its_spill():
    inner = hottest_loop(ASM_SAMPLE)
    assert inner.label == ".LBB0_2" and inner.fmas == 2 and inner.accumulators == 2
    assert inner.broadcast_loads == 1 and inner.fma_memory_operands == 1
    assert inner.stack_accesses == 1 and inner.vector_stores == 1
    assert [lp.label for lp in loops(ASM_SAMPLE)] == [".LBB0_2", ".LBB0_1"]
    assert loops(ASM_SAMPLE)[1].fmas == 3 and loops(ASM_SAMPLE)[1].vector_loads == 1
    with pytest.raises(ValueError, match="no loop"):
        hottest_loop("\tret\n")


def test_asm_reader_tells_a_frame_slot_from_rbp_as_a_pointer():
    # without a frame pointer LLVM hands %rbp out as a general register (a pixel's input
    # pointer, indexed); a frame slot is addressed without an index register
    body = ("\tvbroadcastss\t(%rbp,%r10), %ymm12\n"
            "\tvfmadd231ps\t%ymm12, %ymm13, %ymm0\n")
    assert hottest_loop(f".LBB0_1:\n{body}\tjne\t.LBB0_1\n").stack_accesses == 0
    spill = "\tvmovaps\t%ymm4, -64(%rbp)\n\tvmovaps\t16(%rsp,%rax), %ymm4\n"
    assert hottest_loop(f".LBB0_1:\n{body}{spill}\tjne\t.LBB0_1\n").stack_accesses == 2


@pytest.mark.parametrize("target", ["llvm", AVX2, AVX512, "llvm -mcpu=skylake-avx512"])
@pytest.mark.parametrize("name,args", [("dense", DENSE), ("dense", DENSE + (32,)),
                                       ("dense", (64, 1000, 512)),
                                       ("conv2d_nchw", SEED), ("conv2d_nchw", CONV56)])
def test_fallback_inner_loop_is_clean_fma(target, name, args):
    """The fallback config on the host's ISA and on each family's (AVX2, AVX-512 on 256- and
    on 512-bit units; what a network without tuning records runs; compiled only): full-width
    FMAs (N = 1000 has no 16-lane block: 8 lanes), at least FMA_CHAINS accumulators, no
    spill."""
    caps = capabilities(Target(target))
    if not caps.has_fma or caps.vector_bits < 256:
        pytest.skip("host has no FMA / 256-bit vectors")
    # NOTE: the seed's 7-pixel rows with 16 registers: 7 x 1 ymm is the widest block (7 x 2
    # needs 14 accumulators + 2 weights + 1 broadcast), one chain short of FMA_CHAINS
    short = name == "conv2d_nchw" and args == SEED and caps.vector_registers == 16
    _clean(hottest_loop(_asm(name, args, target)), target, min_acc=7 if short else FMA_CHAINS,
           lanes=8 if 1000 in args else 0)


def _block(name: str, cfg, lanes: int) -> tuple[int, int]:
    if name == "dense":
        return cfg["tile_y"].size[-1], vec_regs(cfg["tile_x"].size[-1], lanes)
    rows = cfg["tile_oh"].size[-1] * cfg["tile_ow"].size[-1]
    return rows, vec_regs(cfg["tile_oc"].size[-1], lanes)


@pytest.mark.parametrize("target", [AVX2, AVX512])
@pytest.mark.parametrize("name,args", [("dense", DENSE), ("conv2d_nchw", SEED),
                                       ("conv2d_nchw", CONV56)])
def test_space_blocks_fit_the_register_file_and_cover_latency(target, name, args):
    caps = capabilities(Target(target))
    lanes, nregs = caps.lanes("float32"), caps.vector_registers
    space = autotvm.task.create(name, args, target).config_space
    blocks = set()
    for i in range(space.range_length):
        if space.is_index_valid(i):
            blocks.add(_block(name, space.get(i), lanes))
    assert blocks
    for rows, nv in blocks:
        assert block_registers(rows, nv) <= nregs, (target, rows, nv)
        assert rows * nv >= FMA_CHAINS, (target, rows, nv)
    # nothing below the physical limit is cut off: the space's biggest block has as many
    # accumulators as any divisor block that fits the register file
    dims = (args[0], args[1]) if name == "dense" else (args[1], args[3])
    assert max(r * v for r, v in blocks) == _limit(name, dims, lanes, nregs)


def _limit(name: str, dims: tuple[int, int], lanes: int, nregs: int) -> int:
    """Most accumulators of a block that fits ``nregs`` registers, by brute force over the
    divisors (dense: rows of M up to 16, or any rows up to 16 with at most MAX_ACCUMULATORS
    (a partial last block), x lanes-wide columns of N; conv: oh_bn <= 4, ow_bn <= 32 rows of a
    square output x whole-register channel blocks up to 64)."""
    widths = [b for b in range(8, 65, 8) if dims[1] % b == 0 and (b % lanes == 0 or b < lanes)]
    if name == "dense":
        m, _ = dims
        return max(r * vec_regs(b, lanes) for r in range(1, 17) for b in widths
                   if block_registers(r, vec_regs(b, lanes)) <= nregs
                   and (m % r == 0 or r * vec_regs(b, lanes) <= MAX_ACCUMULATORS))
    hw = dims[0]
    rows = [y * x for y in range(1, min(hw, 4) + 1) if hw % y == 0
            for x in range(1, min(hw, 32) + 1) if hw % x == 0]
    return max(r * vec_regs(b, lanes) for r in rows for b in widths
               if block_registers(r, vec_regs(b, lanes)) <= nregs)


@pytest.mark.slow
@pytest.mark.parametrize("target", [AVX2, AVX512])
def test_largest_blocks_of_the_space_compile_without_spills(target):
    """The space's limit is the physical one: its biggest dense and conv blocks, compiled for
    each ISA, keep every accumulator in a register."""
    caps = capabilities(Target(target))
    lanes = caps.lanes("float32")
    for name, args in (("dense", DENSE), ("conv2d_nchw", CONV56)):
        space = autotvm.task.create(name, args, target).config_space
        best = max((space.get(i) for i in range(space.range_length)
                    if space.is_index_valid(i)),
                   key=lambda c: block_registers(*_block(name, c, lanes)))
        loop = hottest_loop(_asm(name, args, target, best))
        _clean(loop, target)
        rows, nv = _block(name, best, lanes)
        assert loop.accumulators == rows * nv, (target, name, loop)
