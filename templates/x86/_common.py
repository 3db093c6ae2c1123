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


def lane_filter(n: int, cap: int = 64) -> Any:
    """A ``define_split`` filter keeping inner sizes that are multiples of 8 (or, when ``n`` has
    none, any size) up to ``cap``."""
    has_mult8 = any(n % d == 0 for d in range(8, cap + 1, 8))

    def keep(e: Any) -> bool:
        inner = int(e.size[-1])
        if inner > cap:
            return False
        return inner % 8 == 0 if has_mult8 else True

    return keep


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
               bns: list[int] | None = None) -> tuple[int, int, int]:
    """A fallback register block ``(bn, oh_bn, ow_bn)``: the most accumulator registers that fit
    the host's budget, ``bn`` (vector lanes of output channels, from ``bns`` if given)
    dividing ``co``."""
    lanes, regs = host_vector()
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
                if used <= regs and (used, bn, ow_bn) > best[:3]:
                    best = (used, bn, ow_bn, oh_bn)
    _, bn, ow_bn, oh_bn = best
    return bn, oh_bn, ow_bn
