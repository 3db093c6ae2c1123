"""Helpers shared by the x86 templates: knob filters, fallback choices, padding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from templtune import te
from templtune.topi.utils import get_const_int

#: float32 lanes of one AVX-512 register (the unit the heuristics size blocks in).
VEC = 16
#: vector registers a fallback block leaves for operands: a block two vectors wide needs its
#: two weight vectors and the broadcast, plus one spare (12 accumulators with AVX2).
FALLBACK_OPERAND_REGS = 4
#: independent FMA chains (accumulators) that keep a core's FMA pipes busy: x86 cores with FMA
#: issue 2 per cycle at a 4-cycle latency, so fewer than 8 accumulators leave pipes idle.
FMA_CHAINS = 8


def vec_regs(lanes: int, width: int = VEC) -> int:
    """Vector registers of ``width`` lanes one row of ``lanes`` float32 accumulators uses."""
    return -(-lanes // width)


def _cpu_caps(target: Any = None) -> Any:
    """The capability record of the CPU code for ``target`` (default: the current
    ``with Target(...)`` scope, else the host); a GPU target's host for GPU targets."""
    from templtune.target import Target, capabilities

    t = Target(target) if isinstance(target, str) else target
    caps = capabilities(t)
    if caps.is_gpu:
        host = getattr(t if t is not None else Target.current(), "host", None)
        caps = capabilities(host if host is not None else "llvm")
    return caps


def host_vector(target: Any = None) -> tuple[int, int]:
    """``(float32 lanes per register, accumulator registers)`` of fallback configs for
    ``target`` (default: the current scope's, else the host): the register file less
    :data:`FALLBACK_OPERAND_REGS`, ``(16, 28)`` with AVX-512, ``(8, 12)`` with AVX2."""
    caps = _cpu_caps(target)
    return caps.lanes("float32"), caps.accumulators(FALLBACK_OPERAND_REGS)


def target_vector(target: Any = None) -> tuple[int, int]:
    """``(float32 lanes per register, accumulator registers)`` the search-space filters use for
    ``target`` (default: the current ``with Target(...)`` scope, else the host): the capability
    record's ``accumulator_registers``, ``(16, 28)`` with AVX-512, ``(8, 14)`` with AVX2.

    So a space built for ``llvm -mcpu=znver3`` is AVX2-sane, and one for ``llvm -mcpu=znver4``
    AVX-512-sane wherever it is built.
    """
    caps = _cpu_caps(target)
    return caps.lanes("float32"), caps.accumulator_registers


def fma_lanes(target: Any = None) -> int:
    """float32 lanes of one pass through ``target``'s FMA units (default: the current scope's,
    else the host): 16 with 512-bit units, 8 with 256-bit ones (AVX2, and AVX-512 on Zen 4,
    which runs a zmm FMA as two halves: there an 8-lane ymm FMA issues at twice a zmm's rate)."""
    return max(1, int(_cpu_caps(target).fma_bits) // 32)


def cores(target: Any = None) -> int:
    """Threads a kernel for ``target`` runs on (default: the current scope's, else the host):
    its ``-num-cores``, else the cores this process may run on."""
    return max(1, int(_cpu_caps(target).cores))


def idle_share(units: int, threads: int) -> float:
    """Share of ``threads`` threads' time spent waiting for the busiest one when a parallel
    loop of ``units`` equal iterations runs on them (0: every thread gets as many)."""
    return 1.0 - units / (threads * -(-units // threads))


def register_file(target: Any = None) -> int:
    """Architectural vector registers of ``target`` (default: the current scope's, else the
    host): 32 with AVX-512, 16 with AVX2."""
    return int(_cpu_caps(target).vector_registers)


def block_registers(rows: int, vecs: int, steps: int = 1) -> int:
    """Vector registers a register block of ``rows`` broadcast rows x ``vecs`` vectors needs:
    its ``rows * vecs`` accumulators plus the operands live at once, per reduction step the
    ``min(rows, vecs)`` registers of the side reused across the other and one more. ``steps``:
    reduction steps whose operands are live together (a short inner loop that LLVM unrolls
    and interleaves). A block over the register file spills in its inner loop."""
    return rows * vecs + steps * (min(rows, vecs) + 1)


def interleaved_steps(inner: int, unrolled_taps: int = 1) -> int:
    """Reduction steps LLVM keeps in flight in a block's inner loop of ``inner`` iterations:
    a loop of 2-3 is unrolled and interleaved; with no inner loop (``inner == 1``) the
    ``unrolled_taps`` of the enclosing unrolled loop are."""
    if inner == 1:
        return max(1, unrolled_taps)
    return inner if inner < 4 else 1


def chain_floor(blocks: Sequence[tuple[int, int]], regs: int) -> int:
    """The fewest accumulators a search space should admit: :data:`FMA_CHAINS`, or less when
    no block among ``blocks`` (``(rows, vecs)`` pairs) that fits ``regs`` registers has that
    many."""
    fit = [r * v for r, v in blocks if block_registers(r, v) <= regs]
    return min(FMA_CHAINS, max(fit, default=1))


def divisor_at_most(n: int, bound: int) -> int:
    """The largest divisor of ``n`` that is ``<= bound`` (at least 1)."""
    return max(d for d in range(1, min(n, max(bound, 1)) + 1) if n % d == 0)


def vector_divisor(n: int, cap: int = 64) -> int:
    """A good vector width dividing ``n``: two host registers' worth of lanes if that divides
    ``n``, else the largest multiple of 16 (then 8) ``<= cap`` dividing ``n``, else the largest
    divisor ``<= cap``."""
    lanes, _ = host_vector()
    # NOTE: two registers per row is the sweet spot of the GEMM recipe (bn=32 on AVX-512).
    if 2 * lanes <= cap and n % (2 * lanes) == 0:
        return 2 * lanes
    for step in (VEC, 8):
        best = [d for d in range(step, cap + 1, step) if n % d == 0]
        if best:
            return best[-1]
    return divisor_at_most(n, cap)


def has_lane_multiple(n: int, cap: int = 64) -> bool:
    """Whether a multiple of 8 up to ``cap`` divides ``n`` (whole vectors tile it exactly)."""
    return any(n % d == 0 for d in range(8, cap + 1, 8))


def padded_widths(n: int, lanes: int, cap: int = 64) -> list[int]:
    """Vector widths for an axis of ``n`` that :func:`has_lane_multiple` rejects (a prime count
    of tokens), computed over ``n`` rounded up to a multiple of the width: multiples of 8 up to
    ``cap`` and up to ``n`` rounded up to 8, in whole registers of ``lanes`` (a power of two
    of them) or one narrower register."""
    top = min(cap, -(-n // 8) * 8)
    return [b for b in range(8, top + 1, 8)
            if b < lanes or (b % lanes == 0 and _power_of_two(b // lanes))]


def lane_filter(n: int, cap: int = 64, lanes: int = 0) -> Any:
    """A ``define_split`` filter keeping inner sizes that are multiples of 8 (or, when ``n`` has
    none, any size) up to ``cap``. With ``lanes`` (the target's float32 lanes), sizes that are
    multiples of 8 must also fill whole registers or one narrower register (``< lanes``): a
    40-lane row is 2.5 zmm registers, whose split vectors LLVM spills."""
    has_mult8 = has_lane_multiple(n, cap)

    def keep(e: Any) -> bool:
        inner = int(e.size[-1])
        if inner > cap:
            return False
        if not has_mult8:
            return True
        return inner % 8 == 0 and (not lanes or inner % lanes == 0 or inner < lanes)

    return keep


class _Inner:
    """A stand-in split entity of inner size ``b`` (what a split filter reads)."""

    __slots__ = ("size",)

    def __init__(self, b: int) -> None:
        self.size = (-1, b)


def inner_sizes(n: int, keep: Any, cap: int = 64) -> list[int]:
    """The divisors of ``n`` up to ``cap`` that the split filter ``keep`` admits as the inner
    size of a two-way split."""
    return [b for b in range(1, min(n, cap) + 1) if n % b == 0 and keep(_Inner(b))]


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def whole_vector_divisor(n: int, lanes: int, cap: int = 64) -> int:
    """:func:`vector_divisor`, moved to a size :func:`lane_filter` with ``lanes`` keeps: whole
    registers if a multiple of ``lanes`` divides ``n``, else one narrower register. The
    registers come in a power of two: LLVM splits a vector of 5 registers (``n = 1000``, 40
    lanes with AVX2) through lane inserts and the stack."""
    bn = vector_divisor(n, cap)
    if bn % 8 or bn < lanes or (bn % lanes == 0 and _power_of_two(bn // lanes)):
        return bn
    whole = [d for d in range(lanes, cap + 1, lanes)
             if n % d == 0 and _power_of_two(d // lanes)]
    if whole:
        return whole[-1]
    return max(d for d in range(8, lanes, 8) if n % d == 0)


def max_inner(cap: int) -> Any:
    """A ``define_split`` filter keeping inner sizes ``<= cap``."""
    return lambda e: int(e.size[-1]) <= cap


def pad_nchw(data: te.Tensor, pads: Sequence[int], name: str = "data_pad") -> te.Tensor:
    """Zero-pad the last two axes of a 4-D tensor by ``(top, left, bottom, right)``."""
    pt, pl, pb, pr = pads
    n, c, h, w = (get_const_int(x) for x in data.shape)
    if not any(pads):
        return data
    return te.compute(
        (n, c, h + pt + pb, w + pl + pr),
        lambda a, b, y, x: te.if_then_else(
            te.all(y >= pt, y < h + pt, x >= pl, x < w + pl),
            data[a, b, y - pt, x - pl], te.const(0.0, data.dtype)),
        name=name)


def pad_tuple(padding: Any) -> tuple[int, int, int, int]:
    """``p``, ``(ph, pw)`` or ``(top, left, bottom, right)`` -> a 4-tuple."""
    if isinstance(padding, int):
        return (padding,) * 4
    p = [int(x) for x in padding]
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return (p[0], p[1], p[2], p[3])
    raise ValueError(f"padding must be an int, (h, w) or (top, left, bottom, right); got {padding}")


def stride_pair(stride: Any) -> tuple[int, int]:
    """``s`` or ``(sh, sw)`` -> a pair."""
    if isinstance(stride, int):
        return stride, stride
    s = [int(x) for x in stride]
    if len(s) != 2:
        raise ValueError(f"stride must be an int or (sh, sw); got {stride}")
    return s[0], s[1]


def check_positive(**dims: int) -> None:
    """Raise ``ValueError`` naming the first non-positive dimension."""
    for k, v in dims.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be a positive integer, got {v!r}")


def best_block(co: int, oh: int, ow: int, ow_cap: int = 32, oh_cap: int = 4,
               bns: list[int] | None = None, steps: int = 1) -> tuple[int, int, int]:
    """A fallback register block ``(bn, oh_bn, ow_bn)``: the most accumulator registers whose
    block fits the register file with its operands (:func:`block_registers`), ``bn`` (vector
    lanes of output channels, from ``bns`` if given) dividing ``co``; ``steps`` as in
    :func:`block_registers`."""
    lanes, _ = host_vector()
    nregs = register_file()
    if not bns:
        bns = ([d for d in range(lanes, 4 * lanes + 1, lanes) if co % d == 0]
               or [vector_divisor(co)])
    best = (0, 0, 0, 0)
    for bn in bns:
        per = vec_regs(bn, lanes)
        for ow_bn in (d for d in range(1, min(ow, ow_cap) + 1) if ow % d == 0):
            for oh_bn in (d for d in range(1, min(oh, oh_cap) + 1) if oh % d == 0):
                used = per * ow_bn * oh_bn
                # NOTE: most accumulators first, then the wider channel block (fewer
                # broadcasts per FMA), then the longer row.
                if (block_registers(ow_bn * oh_bn, per, steps) <= nregs
                        and (used, bn, ow_bn) > best[:3]):
                    best = (used, bn, ow_bn, oh_bn)
    _, bn, ow_bn, oh_bn = best
    if not bn:  # no block fits: the narrowest channel block, one output per block
        return bns[0], 1, 1
    return bn, oh_bn, ow_bn


def register_block(s: Any, acc: Any, parent: Any, loop: Any, unroll: int) -> None:
    """Compute ``acc`` (a product whose last two axes are a block's rows and vector columns,
    summed over one reduction axis) at ``loop`` of stage ``parent`` as a register block: the
    reduction split by ``unroll`` outside the block, the inner step and the rows unrolled,
    the columns vectorized, so every accumulator stays in a register."""
    st = s[acc]
    st.compute_at(parent, loop)
    rows, cols = st.op.axis[-2:]
    (red,) = st.op.reduce_axis
    ro, ri = st.split(red, factor=unroll)
    st.reorder(ro, ri, rows, cols)
    st.unroll(ri)
    st.unroll(rows)
    st.vectorize(cols)


def schedule_pack(stage: Any, rows_inner: bool, vectorize: bool) -> None:
    """Schedule a ``[B, N / bn, K, bn]`` column pack: with ``rows_inner`` (the source is
    ``[B, N, K]``) the copy walks each source row (``k`` innermost), else whole ``bn``-wide rows
    (vectorized when ``vectorize``: no padding guard); parallel over (batch, block)."""
    pb, po, pr, pw = stage.op.axis
    if rows_inner:
        stage.reorder(pb, po, pw, pr)
    elif vectorize:
        stage.vectorize(pw)
    stage.parallel(stage.fuse(pb, po))
