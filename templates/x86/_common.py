"""Helpers shared by the x86 templates: knob filters, fallback choices, padding."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from templtune import te

#: float32 lanes of one AVX-512 register (the register-budget filters' unit before they became
#: target-aware; kept for callers that size blocks in AVX-512 lanes).
VEC = 16
#: accumulator registers a register tile may use with AVX-512 (32 zmm minus operands).
MAX_ACC_REGS = 28
#: accumulator registers a space's filter admits with AVX2 (16 ymm minus a broadcast operand
#: and a weight vector): looser than the fallback's 12 so tuning can still try 14.
MAX_ACC_REGS_AVX2 = 14


def vec_regs(lanes: int, width: int = VEC) -> int:
    """Vector registers of ``width`` lanes one row of ``lanes`` float32 accumulators uses."""
    return -(-lanes // width)


@functools.lru_cache(maxsize=1)
def host_vector() -> tuple[int, int]:
    """``(float32 lanes per register, accumulator registers)`` of the host CPU: ``(16, 28)``
    with AVX-512, else ``(8, 12)`` (AVX2: 16 registers, up to four kept for the weight
    vectors and the broadcast operand; measured: 14 accumulators of 8 lanes or 8 of 16 lanes
    beat fuller blocks, which spill). Only fallback configs use it."""
    try:
        import llvmlite.binding as llvm

        feats = llvm.get_host_cpu_features()
        has512 = bool(feats.get("avx512f", False))
    except Exception:  # noqa: BLE001 - unknown host: assume AVX2
        has512 = False
    return (16, 28) if has512 else (8, 12)


def target_vector(target: Any = None) -> tuple[int, int]:
    """``(float32 lanes per register, accumulator registers)`` the search-space filters use for
    ``target`` (default: the current ``with Target(...)`` scope): ``(16, 28)`` when it has
    AVX-512, else ``(8, 14)``.

    The instruction set comes from the target's ``-mcpu`` (a CPU name LLVM knows to have
    AVX-512, e.g. ``znver4``) and ``-mattr`` (``+avx512f`` / ``-avx512f``); without ``-mcpu``
    from the host's features (plus ``-mattr``). So a space built for ``llvm`` on this AVX2 host
    is AVX2-sane, and one for ``llvm -mcpu=znver4`` AVX-512-sane wherever it is built.
    """
    from templtune.codegen.llvm.compile import has_avx512
    from templtune.target import Target

    if target is None:
        target = Target.current(allow_none=True)
    elif isinstance(target, str):
        target = Target(target)
    if target is not None and getattr(target, "kind", "llvm") != "llvm":
        return VEC, MAX_ACC_REGS
    return (VEC, MAX_ACC_REGS) if has_avx512(target) else (8, MAX_ACC_REGS_AVX2)


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
    n, c, h, w = (int(x) for x in data.shape)
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
