"""Register-blocked row axes with a partial last block (``dense``, ``batch_matmul``).

A GEMM-like template computes a tile of ``t`` rows as blocks of ``rb`` rows (one broadcast each)
x a few vector registers. With exact splits only, ``rb`` must divide ``t``: a prime row count
(197 tokens) leaves one-row blocks with two accumulators, and ``M = 1024`` on AVX2 stops at 4 x
2 registers where 6 x 2 fits. These helpers add the blocks that no divisor reaches, as
``[mo, mb, rb]`` with ``mo`` dividing ``M``: tiles of ``t = M / mo`` rows, ``mb = ceil(t / rb)``
blocks, the last one partial. Lowering peels that block
(:func:`templtune.lower.partition.partition_loops`), so the full ones run without guards.
A tile holds at most ``max_tile`` rows, so a prime ``M`` above that still has one-row blocks
only: its tile would be all of ``M`` rows (a write cache of ``M x`` the tile's columns).
"""

from __future__ import annotations

from collections.abc import Sequence

from templtune.autotvm.task.knobs import divisors, factor_splits

from ._common import block_registers, divisor_at_most

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


def row_splits(m: int, widths: Sequence[int], regs: int, max_rows: int, max_tile: int
               ) -> list[list[int]]:
    """Candidates of a ``[mo, mb, rb]`` row split of ``m``: the exact splits (in the ``factors``
    policy's order, so every exact record stays a choice), then partial-block ones.

    A partial-block candidate has tiles of ``t`` rows (a divisor of ``m``, ``<= max_tile``) and
    blocks of ``rb`` rows, ``rb`` above the largest divisor of ``t`` that a block of some width
    in ``widths`` (vector registers per row) fits in ``regs`` registers, up to the most rows
    that width fits and :data:`MAX_ACCUMULATORS`: only blocks with more accumulators than any
    exact one of that width (so a power-of-two ``m`` on AVX-512 gets none).
    """
    out = factor_splits(m, 3)
    caps = sorted({(most_rows(v, regs, max_rows), max(1, MAX_ACCUMULATORS // v))
                   for v in widths})
    for t in divisors(m):
        if t > max_tile:
            break
        heights = {rb for cap, acc in caps
                   for rb in range(divisor_at_most(t, cap) + 1, min(cap, acc, t - 1) + 1)}
        out.extend([m // t, -(-t // rb), rb] for rb in sorted(heights))
    return out


def fallback_rows(m: int, vecs: int, regs: int, max_rows: int, max_tile: int
                  ) -> list[int]:
    """A fallback ``[mo, mb, rb]`` for blocks ``vecs`` registers wide.

    The exact block of the most rows that fit, one block per tile, unless it has fewer than
    :data:`MAX_ACCUMULATORS` while a taller one fits: then tiles of the fewest rows that
    hold 8 such blocks (the partial one costs at most an eighth), or the tallest tile, with the
    taller blocks.
    """
    most = most_rows(vecs, regs, max_rows)
    rb = divisor_at_most(m, most)
    want = min(most, max(1, MAX_ACCUMULATORS // vecs))
    if rb >= want:
        return [m // rb, 1, rb]
    tiles = [t for t in divisors(m) if want < t <= max_tile]
    if not tiles:
        return [m // rb, 1, rb]
    t = next((t for t in tiles if t >= 8 * want), tiles[-1])
    return [m // t, -(-t // want), want]
