"""How a ``conv2d_NCHWc`` kernel's work is shared among the threads: bands of output rows (a
chunked conv) or of fused pixels (a pointwise conv over them) beside the output-channel blocks,
where those blocks alone would leave a thread idle (:func:`band_rows`, :func:`pixel_bands`)."""

from __future__ import annotations

from typing import Any

from ._common import divisor_at_most, idle_share

#: output pixels a chunk of weights serves while it is in L1 (one band of rows)
BAND_PIXELS = 256
#: idle share of the threads (:func:`._common.idle_share`) a band split may leave
BAND_IDLE = 0.1


def band_rows(oh: int, ow: int, blocks: int = 1, threads: int = 1) -> int:
    """Output rows per band of a chunked conv: the most (dividing ``oh``) within
    :data:`BAND_PIXELS` pixels, at least one, whose bands x ``blocks`` (batch x output-channel
    blocks: the parallel loop's iterations) leave ``threads`` threads evenly loaded.

    Three blocks of a 14x14 map in one band each keep one of two threads idle a third of the
    time; bands of 7 rows give 6 iterations. A band's weights chunk serves fewer pixels (one
    7-pixel row at the least), which costs little: they come from L2.
    """
    rows = [d for d in range(divisor_at_most(oh, max(1, BAND_PIXELS // ow)), 0, -1)
            if oh % d == 0]
    return _balanced(rows, lambda d: blocks * (oh // d), threads)


def pixel_bands(pixels: int, ow_bn: int, blocks: int = 1, threads: int = 1) -> int:
    """Equal bands of the fused pixels an unchunked pointwise conv runs in parallel beside its
    ``blocks`` (:func:`band_rows`' balance): the fewest dividing ``pixels``, each at least one
    register block of ``ow_bn``, that leave the threads evenly loaded (1 where none helps).

    A 55x55 conv to one block of 16 channels has one parallel iteration: its 3025 pixels in
    11 bands of 275 keep 2 threads busy (each band peels its own partial last block)."""
    counts = [k for k in range(1, max(1, pixels // ow_bn) + 1) if pixels % k == 0]
    return _balanced(counts, lambda k: blocks * k, threads)


def _balanced(choices: list[int], units: Any, threads: int) -> int:
    """The first of ``choices`` whose ``units(choice)`` parallel iterations leave ``threads``
    threads at most :data:`BAND_IDLE` idle, else the one that leaves them least idle."""
    def idle(c: int) -> float:
        return idle_share(units(c), threads)

    return next((c for c in choices if idle(c) <= BAND_IDLE), min(choices, key=idle))
