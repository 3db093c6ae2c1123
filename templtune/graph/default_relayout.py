"""The default CPU schedule of a channel (un)blocking: a group whose output is a
``layout_transform`` between NCHW and NCHW[x]c (its injective producers inlined).

Vectorizing the output's innermost axis, as the generic default schedule does, reads the
``b`` lanes of a channel block from ``b`` planes: a gather per vector, which LLVM expands to
scalar loads on CPUs without fast gathers. Here the width loop is the vector loop and the
block's lanes are unrolled inside it, so every load (NCHW -> NCHW[x]c) or store (back) runs
along a row; LLVM's loop vectorizer (:mod:`templtune.lower.passes` leaves it such a loop)
interleaves the ``b`` row vectors with shuffles. Where its shuffles for a block are slow
(blocks wider than :data:`INTERLEAVE_MAX` in registers wider than 256 bits), the row loop
stays serial, the lanes still unrolled.
"""

from __future__ import annotations

from typing import Any

from templtune import te
from templtune.te.tensor import ComputeOp

__all__ = ["schedule_relayout"]

#: the widest channel block interleaved in vector registers of more than eight float lanes
INTERLEAVE_MAX = 8
_PARALLEL_WORK = 1 << 15  # fewer elements run on one thread (as the generic schedule's)


def _extent(iv: Any) -> int:
    return int(iv.dom.extent)


def _interleaves(caps: Any, block: int) -> bool:
    return block <= INTERLEAVE_MAX or caps.lanes("float32") <= 8


def schedule_relayout(s: Any, out: te.Tensor, caps: Any, threshold: int) -> bool:
    """Schedule ``out`` (the group's output, its producers inlined) if it is a float32
    NCHW <-> NCHW[x]c ``layout_transform``; False (nothing done) otherwise."""
    op = out.op
    if (not isinstance(op, ComputeOp) or op.name != "layout_transform" or op.reduce_axis
            or str(out.dtype) != "float32" or len(op.input_tensors) != 1):
        return False
    src = op.input_tensors[0].shape
    stage = s[out]
    if len(op.axis) == 5 and len(src) == 4:  # NCHW -> NCHW[x]c
        n, c1, y, x, lane = op.axis
        block = _extent(lane)
        padded = _extent(c1) * block != int(src[1])
    elif len(op.axis) == 4 and len(src) == 5:  # NCHW[x]c -> NCHW
        n, c, y, x = op.axis
        block, padded = int(src[4]), False
        if _extent(c) % block:
            return False  # a padded source block: the generic schedule's guarded lanes
        c1, lane = stage.split(c, factor=block)
    else:
        return False
    if block < 2 or _extent(x) < 2:
        return False
    stage.reorder(n, c1, y, x, lane)
    stage.unroll(lane)
    if _interleaves(caps, block):
        stage.vectorize(x)
    # NOTE: a padded block's lane test reads the block's loop variable: fused with the rows
    # (a division) or inside them, LLVM no longer vectorizes the loop
    outer = [n, c1] if padded else [n, c1, y]
    if block * _extent(x) * _extent(n) * _extent(y) * _extent(c1) < _PARALLEL_WORK:
        return True
    k, extent = 0, 1
    while k < len(outer) and extent < threshold:
        extent *= _extent(outer[k])
        k += 1
    stage.parallel(stage.fuse(*outer[:k]) if k > 1 else outer[0])
    return True
