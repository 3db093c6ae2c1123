"""Register blocks of the x86 ``conv2d_NCHWc`` micro-kernel: which blocks of output pixels x
output-channel vectors keep their accumulators, weights and broadcasts in the vector register
file, and how a block too wide for it runs in passes."""

from __future__ import annotations

from ._common import register_file, target_vector, vec_regs

__all__ = ["spill_free", "register_vectors", "one_pass", "tail_blocks", "row_steps",
           "pass_width"]


def spill_free(ow_bn: int, vecs: int, taps: int, acc_regs: int, file_regs: int) -> bool:
    """Whether the micro-kernel of ``ow_bn`` pixels x ``vecs`` registers of output channels,
    with ``taps`` kernel-width taps unrolled around it (1: ``unroll_kw`` off or a 1-wide
    kernel), keeps its inner body in the ``file_regs`` vector registers.

    The accumulators may use at most ``acc_regs``. Unrolled taps keep their ``taps * vecs``
    weight vectors live together; with one register per pixel LLVM also shares each input
    broadcast across the taps (pixel ``x + 1`` of tap 0 is pixel ``x`` of tap 1), so about
    ``ow_bn + taps - 2`` broadcasts stay live (one folds into an FMA's memory operand),
    else one. A single tap's block runs in passes (:func:`register_vectors`) that fit the
    file with their weights, so only a pass's accumulators count.
    """
    if taps == 1:
        return ow_bn * register_vectors(ow_bn, vecs, 1, file_regs) <= acc_regs
    acc = ow_bn * vecs
    if acc > acc_regs:
        return False
    shared = ow_bn + taps - 2 if vecs == 1 else 1
    return acc + taps * vecs + shared <= file_regs


def register_vectors(ow_bn: int, vecs: int, taps: int, file_regs: int) -> int:
    """Vectors of output channels per pass of a single-tap micro-kernel (``taps == 1``):
    ``vecs``, or the largest divisor of it whose pass fits the register file.

    LLVM keeps a pass's weight vectors in registers (each serves ``ow_bn`` pixels) beside its
    accumulators and one broadcast, so ``ow_bn`` pixels x ``v`` vectors need ``ow_bn * v + v
    + 1`` registers (``ow_bn + 1`` for one vector: the weight folds into the FMAs). A block
    over that spills accumulators in its inner loop (7 pixels x 2 ymm with AVX2); computed
    as passes of fewer vectors, each over the whole reduction, it does not. Blocks with
    unrolled taps are kept within the file by the space's filter (:func:`spill_free`).
    """
    if taps > 1:
        return vecs
    for v in range(vecs, 0, -1):
        if vecs % v == 0 and ow_bn * v + (v + 1 if v > 1 else 1) <= file_regs:
            return v
    return 1


def one_pass(ow_bn: int, vecs: int, acc_regs: int, file_regs: int) -> bool:
    """Whether a single-tap block of ``ow_bn`` pixels x ``vecs`` vectors runs in one pass
    (:func:`register_vectors`) with its accumulators within ``acc_regs``."""
    return ow_bn * vecs <= acc_regs and register_vectors(ow_bn, vecs, 1, file_regs) == vecs


def tail_blocks(ow: int, pixels: int, vec_counts: list[int], acc_regs: int,
                file_regs: int) -> list[int]:
    """Register blocks that divide no row of ``ow`` pixels, run with their partial last
    block peeled: over the fused pixels of a pointwise conv (``pixels`` its output pixels;
    :func:`conv2d_nchwc_pixels.pointwise_pixels`), along each row of any other (``pixels ==
    ow``).

    For each channel-vector count ``v``: every pixel count whose one pass fits
    (:func:`one_pass`) with at least half the accumulator registers, where that is more than
    the best row block in one pass (a divisor of ``ow``) has. With AVX2 a 16-channel block
    gets 4 to 6 pixels (8 to 12 of 16 ymm) on rows of 7 and 14 (which offer 7 x 1 ymm passes,
    one broadcast per FMA, or 2 x 2) and 5 or 6 on rows of 28 and 56 (4 x 2: 8 chains, just
    the FMA latency x pipes of Zen and Haswell, no slack for the loads). Which one wins
    depends on the tail: on a row of 7, 4 + 3 pixels beat 6 + 1 (a 1-pixel block is
    latency-bound).
    """
    out = set()
    for v in vec_counts:
        fits = [b for b in range(1, 33) if one_pass(b, v, acc_regs, file_regs)]
        row = max((b for b in fits if b <= ow and ow % b == 0), default=0)
        out |= {p for p in fits
                if row < p < pixels and ow % p and 2 * p * v >= acc_regs}
    return sorted(out)


def row_steps(ow: int, block: int, vecs: int, acc_regs: int) -> int:
    """Cycles per reduction step of a row of ``ow`` pixels in blocks of ``block`` (the last
    one partial) x ``vecs`` vectors: each block's FMA chain takes its accumulators' count of
    cycles, but no fewer than half the accumulator registers (the FMA latency x pipes it
    must cover: 8 with AVX2 on Zen, whose 16 ymm hold 14 accumulators)."""
    sizes = [block] * (ow // block) + ([ow % block] if ow % block else [])
    return sum(max(p * vecs, acc_regs // 2) for p in sizes)


def pass_width(ow_bn: int, oc_bn: int, taps: int, vector: int = 0) -> int:
    """Output-channel lanes of one pass of the ``ow_bn`` x ``oc_bn`` block (``taps``: kw
    taps unrolled around it) of ``vector``-lane accumulators (default: a register's): a
    whole number of :func:`register_vectors`, else ``oc_bn``."""
    lanes = vector or target_vector()[0]
    width = lanes * register_vectors(ow_bn, vec_regs(oc_bn, lanes), taps, register_file())
    return width if oc_bn % width == 0 else oc_bn
