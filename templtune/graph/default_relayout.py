"""The default CPU schedule of a channel (un)blocking: a group whose output is a
``layout_transform`` between NCHW and NCHW[x]c (its injective producers inlined).

Vectorizing the output's innermost axis, as the generic default schedule does, reads the
``b`` lanes of a channel block from ``b`` planes: a gather per vector, which LLVM expands to
scalar loads on CPUs without fast gathers. Here the width loop is the vector loop and the
block's lanes are unrolled inside it, so every load (NCHW -> NCHW[x]c) or store (back) runs
along a row; LLVM's loop vectorizer (:mod:`templtune.lower.vectorize` leaves it such a loop)
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


def _extent(iv: Any) -> int:
    return int(iv.dom.extent)


def _interleaves(caps: Any, block: int) -> bool:
    return block <= INTERLEAVE_MAX or caps.lanes("float32") <= 8


def schedule_relayout(s: Any, out: te.Tensor, caps: Any) -> list[Any] | None:
    """Schedule ``out`` (the group's output, its producers inlined) if it is a float32
    NCHW <-> NCHW[x]c ``layout_transform``, but for its parallel loop: returns the leading
    loops the threads may share, outermost first. None (nothing done) for any other output."""
    op = out.op
    if (not isinstance(op, ComputeOp) or op.name != "layout_transform" or op.reduce_axis
            or str(out.dtype) != "float32" or len(op.input_tensors) != 1):
        return None
    src = op.input_tensors[0].shape
    stage = s[out]
    if len(op.axis) == 5 and len(src) == 4:  # NCHW -> NCHW[x]c
        n, c1, y, x, lane = op.axis
        block = _extent(lane)
        padded = _extent(c1) * block != int(src[1])
    elif len(op.axis) == 4 and len(src) == 5:  # NCHW[x]c -> NCHW
        n, c, y, x = op.axis
        block, padded = int(src[4]), False
        # NOTE: a padded source block keeps the generic schedule's guarded lanes
        if _extent(c) % block or block < 2 or _extent(x) < 2:
            return None
        c1, lane = stage.split(c, factor=block)
    else:
        return None
    if block < 2 or _extent(x) < 2:
        return None
    stage.reorder(n, c1, y, x, lane)
    stage.unroll(lane)
    if _interleaves(caps, block):
        stage.vectorize(x)
    # NOTE: a padded block's lane test reads the block's loop variable: fused with the rows
    # (a division) or inside them, LLVM no longer vectorizes the loop
    return [n, c1] if padded else [n, c1, y]
