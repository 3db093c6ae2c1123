"""Channel blocks of ``conv2d_NCHWc``: the fallback's block, blocks padded past channel counts
no multiple of 8 divides (ShuffleNet's 58 and 116), and the blockings of a grouped convolution
(ResNeXt, RegNet).

A padded block holds zeros past the channels: the graph packs data and weights with them, and
only ops that keep those lanes finite run on such a layout. In a grouped convolution a block
of ``oc_bn`` output channels either lies within one group (``oc_bn`` divides the
group's output channels; its input blocks then lie within the group's input channels) or
holds whole groups: ``m = oc_bn / og`` neighbouring groups merge into one whose kernel is
block-diagonal (``graph.ops.nchwc.pack_group_kernel``), computing ``m`` times the
multiplies. A merged block is kept only up to one vector register (or one group): it pays
for filling the register's lanes, where narrower vectors would waste the same share of the
FMA pipes, and no more.
"""

from __future__ import annotations

from typing import Any

from templtune.topi.utils import round_up

from ._common import divisor_at_most, has_lane_multiple, inner_sizes, lane_filter, vec_regs

__all__ = ["fallback_block", "padded_blocks", "channel_split", "merge_factor",
           "blocks_ok", "oc_filter", "fallback_blocks"]

_CAP = 64


def fallback_block(n: int, lanes: int) -> int:
    """The channel block of a fallback config: two registers' worth of lanes if it divides
    ``n``, else one register's, else the largest multiple of 8 up to 64 that fills whole
    registers or one narrower register, else the largest power of two dividing ``n`` (2 or
    4), else the largest divisor up to 64 (the stem's 3 channels stay one block)."""
    for b in (2 * lanes, lanes):
        if n % b == 0:
            return b
    # NOTE: a 40-lane block is 2.5 zmm, a 58-lane one 3.6: LLVM splits their vectors and
    # spills; the multiples of 8 are those the space's lane filter keeps
    if has_lane_multiple(n):
        return inner_sizes(n, lane_filter(n, lanes=lanes))[-1]
    # NOTE: 2- or 4-lane blocks (58 channels) leave most of each vector idle: a padded block
    # of whole registers wastes at most a quarter
    pad = padded_blocks(n, lanes)
    if pad:
        return next((b for b in (2 * lanes, lanes) if b in pad), pad[-1])
    pow2 = n & -n
    return pow2 if pow2 > 1 else divisor_at_most(n, 64)


def padded_blocks(n: int, lanes: int) -> list[int]:
    """Channel blocks that do not divide ``n`` (the blocks hold zeros past it), for counts
    of at least 16 that no multiple of 8 divides (ShuffleNet's 58 and 116): multiples of 8
    up to 64 that fill whole registers or one narrower one, padding at most a quarter."""
    if n < 16 or has_lane_multiple(n):
        return []
    return [b for b in range(8, 65, 8) if 4 * round_up(n, b) <= 5 * n
            and (b % lanes == 0 or b < lanes)]


def channel_split(cfg: Any, name: str, n: int, keep: Any, lanes: int) -> list[int]:
    """Define split knob ``name`` over ``n`` channels with the inner sizes the split filter
    ``keep`` admits and the :func:`padded_blocks`; returns all of them."""
    pad = padded_blocks(n, lanes)
    if not pad:
        cfg.define_split(name, n, num_outputs=2, filter=keep)
        return inner_sizes(n, keep, _CAP)
    sizes = sorted(set(inner_sizes(n, keep, _CAP)) | set(pad))
    cfg.define_split(name, n, policy="candidate", num_outputs=2,
                     candidate=[[-1, b] for b in sizes])
    return sizes


def merge_factor(groups: int, co: int, oc_bn: int) -> int:
    """The groups one output block of ``oc_bn`` channels holds (1: it lies within one)."""
    og = co // groups
    return 1 if oc_bn <= og else oc_bn // og


def _oc_ok(groups: int, co: int, oc_bn: int, lanes: int) -> bool:
    og = co // groups
    if og % oc_bn == 0:
        return True
    m = oc_bn // og
    return oc_bn % og == 0 and groups % m == 0 and oc_bn <= max(lanes, og)


def blocks_ok(groups: int, co: int, ci: int, ic_bn: int, oc_bn: int, lanes: int) -> bool:
    """Whether ``(ic_bn, oc_bn)`` is a blocking of a convolution of ``ci -> co`` channels in
    ``groups`` groups: each output block reads whole input blocks of its (merged) group."""
    if not _oc_ok(groups, co, oc_bn, lanes):
        return False
    return (ci // groups * merge_factor(groups, co, oc_bn)) % ic_bn == 0


def _oc_blocks(groups: int, co: int, lanes: int) -> list[int]:
    """The output blocks up to 64 a grouped convolution can run at: those the lane filter
    keeps (whole registers), else any."""
    ok = [b for b in range(1, min(co, _CAP) + 1) if co % b == 0 and _oc_ok(groups, co, b, lanes)]
    whole = set(inner_sizes(co, lane_filter(co, lanes=lanes), _CAP))
    return [b for b in ok if b in whole] or ok


def oc_filter(groups: int, co: int, lanes: int) -> Any:
    """A ``define_split`` filter keeping the output blocks of :func:`_oc_blocks`."""
    allowed = frozenset(_oc_blocks(groups, co, lanes))
    return lambda e: int(e.size[-1]) in allowed


def fallback_blocks(groups: int, co: int, ci: int, lanes: int, preferred: int) -> tuple[int, int]:
    """``(ic_bn, oc_bn)`` of the fallback config: the output block whose lanes do the most
    useful work (``1 / m`` of a merged block's, a register's share of a narrow one's), the
    ``preferred`` block (the ungrouped fallback's, which its neighbours run at: no layout
    transform) among equals, else the wider; the input block equal to it where that divides
    the group's input channels, else the largest that does."""
    def useful(b: int) -> float:
        return b / (vec_regs(b, lanes) * lanes) / merge_factor(groups, co, b)

    oc_bn = max(_oc_blocks(groups, co, lanes), key=lambda b: (useful(b), b == preferred, b))
    width = ci // groups * merge_factor(groups, co, oc_bn)
    ic_bn = oc_bn if width % oc_bn == 0 else divisor_at_most(width, _CAP)
    return ic_bn, oc_bn
