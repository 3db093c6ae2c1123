"""Channel blocks of ``conv2d_NCHWc``: the fallback's block, blocks padded past channel counts
no multiple of 8 divides (ShuffleNet's 58 and 116), and the blockings of a grouped convolution
(ResNeXt, RegNet).

A padded block holds zeros past the channels: the graph packs data and weights with them, and
only ops that keep those lanes finite run on such a layout. In a grouped convolution a block
of ``oc_bn`` output channels either lies within one group (``oc_bn`` divides the
group's output channels; its input blocks then lie within the group's input channels) or
holds ``m = oc_bn / og`` whole groups and reads the one input block of their channels. Its
kernel is split (``graph.ops.nchwc.pack_group_kernel``): each output lane weighs only its own
group's inputs and each vector lies within one group, so merging wastes no multiplies, and a
grouped convolution can run at its neighbours' blocking.
"""

from __future__ import annotations

import math
from typing import Any

from templtune.topi.nn.conv2d import group_blocks_ok, group_merge, group_oc_block_ok
from templtune.topi.utils import round_up

from ._common import divisor_at_most, has_lane_multiple, inner_sizes, lane_filter, vec_regs

__all__ = ["fallback_block", "padded_blocks", "channel_split", "vector_lanes", "spans_groups",
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


#: the widest group a vector may span several of: its lanes then broadcast one input per
#: group within each 128-bit lane, one load and an in-lane shuffle (a vector of groups of 8
#: would need a cross-lane permute)
SPAN_GROUP = 4


def spans_groups(groups: int, co: int, ci: int, lanes: int, fma: int) -> bool:
    """Whether a merged block's vectors span several groups: groups of ``co / groups``
    output channels reading as many inputs, narrower than the ``fma``-lane FMA units, whose
    lanes stay within 128-bit lanes (:data:`SPAN_GROUP`). Each vector then reads its groups'
    inputs as one window of the block (``lower.vectorize``: a masked load and a shuffle), where
    a vector per group would use a fraction of each FMA."""
    og = co // groups
    return groups > 1 and og == ci // groups and SPAN_GROUP % og == 0 and og < min(fma, lanes)


def vector_lanes(groups: int, co: int, oc_bn: int, lanes: int, ci: int | None = None,
                 fma: int | None = None) -> int:
    """Lanes of one accumulator vector of an ``oc_bn`` output block: ``lanes`` (a register),
    fewer in a block of several groups, whose vectors each lie within one group unless they
    may span groups (:func:`spans_groups`, given the input channels ``ci`` and the FMA
    lanes ``fma``)."""
    og = co // groups
    if groups == 1 or oc_bn <= og:
        return lanes
    if ci is not None and fma is not None and spans_groups(groups, co, ci, lanes, fma):
        return lanes
    return math.gcd(og, lanes)


def blocks_ok(groups: int, co: int, ci: int, ic_bn: int, oc_bn: int, lanes: int) -> bool:
    """Whether ``(ic_bn, oc_bn)`` is a blocking of a convolution of ``ci -> co`` channels in
    ``groups`` groups (:func:`templtune.topi.nn.conv2d.group_blocks_ok`)."""
    return group_blocks_ok(groups, ci, co, ic_bn, oc_bn)


def _oc_blocks(groups: int, co: int, lanes: int) -> list[int]:
    """The output blocks up to 64 a grouped convolution can run at: those the lane filter
    keeps (whole registers), else any."""
    ok = [b for b in range(1, min(co, _CAP) + 1) if co % b == 0 and group_oc_block_ok(groups, co, b)]
    whole = set(inner_sizes(co, lane_filter(co, lanes=lanes), _CAP))
    return [b for b in ok if b in whole] or ok


def oc_filter(groups: int, co: int, lanes: int) -> Any:
    """A ``define_split`` filter keeping the output blocks of :func:`_oc_blocks`."""
    allowed = frozenset(_oc_blocks(groups, co, lanes))
    return lambda e: int(e.size[-1]) in allowed


def fallback_blocks(groups: int, co: int, ci: int, lanes: int, preferred: int,
                    fma_lanes: int | None = None) -> tuple[int, int]:
    """``(ic_bn, oc_bn)`` of the fallback config: the output block whose vectors fill the
    FMA units best (``fma_lanes`` wide, default ``lanes``; a merged block's vectors hold one
    group each), the ``preferred`` block (the ungrouped fallback's, which its neighbours run
    at: no layout transform) among equals, else the wider; the input block: a merged
    block's groups' channels, else equal to it where that divides a group's input channels,
    else the largest that does."""
    unit = lanes if fma_lanes is None else fma_lanes
    cg = ci // groups

    def useful(b: int) -> float:
        # NOTE: with 256-bit FMA units (Zen 4) an 8-lane ymm FMA issues at twice a zmm's
        # rate: vectors of one 8-channel group each run at full speed
        v = min(b, vector_lanes(groups, co, b, lanes, ci, unit))
        return v / (vec_regs(v, unit) * unit)

    oc_bn = max(_oc_blocks(groups, co, lanes), key=lambda b: (useful(b), b == preferred, b))
    m = group_merge(groups, co, oc_bn)
    if m > 1:
        return cg * m, oc_bn
    return (oc_bn if cg % oc_bn == 0 else divisor_at_most(cg, _CAP)), oc_bn
