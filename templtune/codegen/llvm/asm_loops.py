"""Read the loops of x86 assembly (``Module.get_source("asm")``, AT&T syntax) back.

A register-blocked kernel is judged by its innermost loop: how many FMAs, into how many
accumulator registers, with which operands, and whether anything goes to the stack (a spill).
:func:`hottest_loop` finds the innermost loop (a label and the backward branch to it) with the
most FMAs and summarizes it as an :class:`AsmLoop`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["AsmLoop", "hottest_loop", "loops"]

_LABEL = re.compile(r"^(\.?L[\w$.]+):")
_JUMP = re.compile(r"^\s+j\w+\s+(\.?L[\w$.]+)\s*$")
_FMA = re.compile(r"^\s+vfn?m(add|sub)\d{3}p[sd]\s+(.*)$")
_VREG = re.compile(r"%([xyz]mm\d+)")
# NOTE: a spill or reload addresses a frame slot, never with an index register; %rbp with one
# is a general register (the frame pointer omitted) holding, say, a pixel's input pointer
_STACK = re.compile(r"\(%rsp\b|\(%rbp\)")
_MEM = re.compile(r"[-\w$.]*\(%\w+(?:,%\w+)?(?:,\d)?\)")


@dataclass(frozen=True, slots=True)
class AsmLoop:
    """One loop of the assembly, from its label to the branch back.

    Attributes
    ----------
    label : str
        The loop head's label.
    fmas : int
        FMA instructions in the body.
    accumulators : int
        Distinct registers the FMAs accumulate into (their last operand).
    fma_width : frozenset of str
        Register kinds of the FMAs (``"zmm"``, ``"ymm"``, ``"xmm"``).
    fma_memory_operands : int
        FMAs that read one operand from memory (including ``{1toN}`` broadcasts).
    broadcast_loads : int
        ``vbroadcastss/sd`` from memory.
    vector_loads : int
        Plain vector loads from memory (``vmovups``/``vmovaps`` into a register).
    stack_accesses : int
        Instructions that touch the stack (``(%rsp...)``, or ``(%rbp)`` without an index
        register): spills and reloads.
    vector_stores : int
        Vector stores to memory.
    other_vector_ops : tuple of str
        Mnemonics of the other vector instructions (shuffles, permutes, adds, ...).
    """

    label: str
    fmas: int
    accumulators: int
    fma_width: frozenset[str]
    fma_memory_operands: int
    broadcast_loads: int
    vector_loads: int
    stack_accesses: int
    vector_stores: int
    other_vector_ops: tuple[str, ...]


def _summarize(label: str, body: list[str]) -> AsmLoop:
    fmas = mem_fma = bcast = vload = stack = vstore = 0
    accs: set[str] = set()
    widths: set[str] = set()
    other: list[str] = []
    for line in body:
        if not line.startswith(("\t", " ")) or not line.strip() or line.strip().startswith("."):
            continue
        ins = line.split("#", 1)[0].strip()
        if not ins:
            continue
        mnem, *rest = ins.split(None, 1)
        ops = rest[0].strip() if rest else ""
        if _STACK.search(ops):
            stack += 1
        regs = _VREG.findall(ops)
        m = _FMA.match(line)
        if m:
            fmas += 1
            if regs:
                accs.add(regs[-1])
                widths.update(r[:3] for r in regs)
            if _MEM.search(ops):
                mem_fma += 1
        elif mnem.startswith("vbroadcasts") and _MEM.search(ops):
            bcast += 1
        elif mnem in ("vmovups", "vmovaps", "vmovupd", "vmovapd") and regs:
            src, _, dst = ops.rpartition(",")
            if _MEM.search(src) and _VREG.search(dst):
                vload += 1
            elif _MEM.search(dst):
                vstore += 1
            else:
                other.append(mnem)
        elif regs:
            other.append(mnem)
    return AsmLoop(label, fmas, len(accs), frozenset(widths), mem_fma, bcast, vload, stack,
                   vstore, tuple(other))


def _ranges(asm: str) -> tuple[list[str], list[tuple[str, int, int]]]:
    lines = asm.splitlines()
    where: dict[str, int] = {}
    out = []
    for i, line in enumerate(lines):
        lab = _LABEL.match(line)
        if lab:
            where[lab.group(1)] = i
            continue
        jump = _JUMP.match(line)
        if jump and jump.group(1) in where:
            out.append((jump.group(1), where[jump.group(1)], i))
    return lines, out


def loops(asm: str, innermost: bool = False) -> list[AsmLoop]:
    """Every loop of ``asm``: a label followed, further down, by a jump back to it (the body
    is the text in between, inner loops included); with ``innermost``, only the loops that
    contain no other loop."""
    lines, ranges = _ranges(asm)
    if innermost:
        ranges = [r for r in ranges
                  if not any(r[1] <= o[1] and o[2] <= r[2] and o != r for o in ranges)]
    return [_summarize(lab, lines[a + 1:b + 1]) for lab, a, b in ranges]


def hottest_loop(asm: str) -> AsmLoop:
    """The innermost loop with the most FMAs.

    Raises
    ------
    ValueError
        If the assembly has no innermost loop with an FMA.
    """
    found = [lp for lp in loops(asm, innermost=True) if lp.fmas]
    if not found:
        raise ValueError("no loop with an FMA instruction in this assembly")
    return max(found, key=lambda lp: lp.fmas)
