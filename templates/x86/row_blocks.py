"""Register-blocked row axes with a partial last block (``dense``, ``batch_matmul``).

A GEMM-like template computes a tile of ``t`` rows as blocks of ``rb`` rows (one broadcast each)
x a few vector registers. With exact splits only, ``rb`` must divide ``t``: a prime row count
(197 tokens) leaves one-row blocks with two accumulators, and ``M = 1024`` on AVX2 stops at 4 x
2 registers where 6 x 2 fits. These helpers add the blocks that no divisor reaches, as
``[mo, mb, rb]`` with ``mo`` dividing ``M``: tiles of ``t = M / mo`` rows, ``mb = ceil(t / rb)``
blocks, the last one partial. Lowering peels that block
(:func:`templtune.lower.partition.partition_loops`), so the full ones run without guards.
A tile holds at most ``max_tile`` rows, unless no divisor of ``M`` up to ``max_tile`` can hold
:data:`MAX_ACCUMULATORS` rows (a prime ``M`` above it, 577 tokens): then the smallest divisor
above it is a tile too (:func:`wide_tile`), whose write cache of ``t x`` the tile's columns is
written once per element. A row tile that does not divide ``M`` would leave a guard in every
block: the fused parallel loop over (column tile, row tile) cannot peel its last tile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from templtune.autotvm.task.knobs import divisors, factor_splits

from ._common import FALLBACK_OPERAND_REGS, block_registers, divisor_at_most

#: accumulators a partial-block candidate or a fallback block goes up to: past the FMA
#: latency's 8, the slack covers load stalls; taller blocks (12 x 2 AVX-512 registers) ran
#: slower than 8 x 2 (results/gemm.txt).
MAX_ACCUMULATORS = 16


def tile_rows(m: int, size: Sequence[int]) -> int:
    """The rows of one tile of a ``[mo, mb, rb]`` row split of ``m`` rows: ``m / mo``, or
    ``mb * rb`` when ``mo`` is the ``-1`` placeholder."""
    mo, mb, rb = (int(x) for x in size)
    return m // mo if mo > 0 else mb * rb


def most_rows(vecs: int, regs: int, cap: int) -> int:
    """The most rows (``<= cap``) of a block ``vecs`` registers wide that fits ``regs``."""
    return max((r for r in range(1, cap + 1) if block_registers(r, vecs) <= regs), default=1)


def wide_tile(m: int, max_tile: int) -> int | None:
    """The tile of more than ``max_tile`` rows that ``m`` needs for blocks of
    :data:`MAX_ACCUMULATORS` rows (its smallest divisor above ``max_tile``), or ``None`` when a
    divisor up to ``max_tile`` holds them."""
    ds = divisors(m)
    if any(MAX_ACCUMULATORS <= t <= max_tile for t in ds):
        return None
    return next((t for t in ds if t > max_tile), None)


def tile_filter(m: int, max_rows: int, max_tile: int) -> Callable[[Any], bool]:
    """The ``tile_y`` filter: blocks of at most ``max_rows`` rows, tiles of at most ``max_tile``
    rows or the :func:`wide_tile`."""
    wide = wide_tile(m, max_tile)

    def keep(e: Any) -> bool:
        _, mb, rb = (int(x) for x in e.size)
        return rb <= max_rows and (mb * rb <= max_tile or tile_rows(m, e.size) == wide)
    return keep


def row_splits(m: int, widths: Sequence[int], regs: int, max_rows: int, max_tile: int
               ) -> list[list[int]]:
    """Candidates of a ``[mo, mb, rb]`` row split of ``m``: the exact splits (in the ``factors``
    policy's order, so every exact record stays a choice), then partial-block ones.

    A partial-block candidate has tiles of ``t`` rows (a divisor of ``m``, ``<= max_tile`` or
    the :func:`wide_tile`) and
    blocks of ``rb`` rows, ``rb`` above the largest divisor of ``t`` that a block of some width
    in ``widths`` (vector registers per row) fits in ``regs`` registers, up to the most rows
    that width fits and :data:`MAX_ACCUMULATORS`: only blocks with more accumulators than any
    exact one of that width (so a power-of-two ``m`` on AVX-512 gets none).
    """
    out = factor_splits(m, 3)
    caps = sorted({(most_rows(v, regs, max_rows), max(1, MAX_ACCUMULATORS // v))
                   for v in widths})
    wide = wide_tile(m, max_tile)
    for t in divisors(m):
        if t > max_tile and t != wide:
            continue
        heights = {rb for cap, acc in caps
                   for rb in range(divisor_at_most(t, cap) + 1, min(cap, acc, t - 1) + 1)}
        out.extend([m // t, -(-t // rb), rb] for rb in sorted(heights))
    return out


def fallback_rows(m: int, vecs: int, regs: int, max_rows: int, max_tile: int,
                  accumulators: int = MAX_ACCUMULATORS) -> list[int]:
    """A fallback ``[mo, mb, rb]`` for blocks ``vecs`` registers wide.

    The exact block of the most rows that fit ``regs - 1`` registers, one block per tile,
    unless it has fewer than :data:`MAX_ACCUMULATORS` (or ``accumulators``, the host's
    fallback share, where fewer) while a taller one fits: then tiles of the fewest rows that
    hold 8 such blocks (the partial one costs at most an eighth), or the tallest tile, with
    the taller blocks. A block one register wide takes ``FALLBACK_OPERAND_REGS`` fewer
    accumulators.
    """
    # NOTE: a register spare beyond block_registers' count: a block filling AVX2's 16 (3 x 4
    # ymm) spilled in its inner loop
    most = most_rows(vecs, regs - 1, max_rows)
    if vecs == 1:
        # NOTE: rows one vector wide share no broadcast: each FMA takes its own, and LLVM
        # schedules the next reduction step's early, so the block leaves room for them
        accumulators -= FALLBACK_OPERAND_REGS
        most = min(most, max(1, accumulators))
    rb = divisor_at_most(m, most)
    want = min(most, max(1, min(MAX_ACCUMULATORS, accumulators) // vecs))
    if rb >= want:
        return [m // rb, 1, rb]
    wide = wide_tile(m, max_tile)
    tiles = [t for t in divisors(m) if want < t and (t <= max_tile or t == wide)]
    if not tiles:
        return [m // rb, 1, rb]
    t = next((t for t in tiles if t >= 8 * want), tiles[-1])
    return [m // t, -(-t // want), want]
