"""Fused epilogues: an anchor op's element-wise tail computed in its template's output stage.

A network group ``conv2d -> bias_add -> add -> relu`` would otherwise run the template's kernel
and then a second kernel over the whole output for the tail. An :class:`Epilogue` is that tail
as a function from the template's output tensor (the anchor op's result, in the op's layout) to
the group's output, plus the extra inputs it reads (bias, residual). A template that supports
epilogues (``strategy.register(..., epilogue=True)``) takes it as the keyword ``epilogue`` and
calls :func:`attach` on its output, then :func:`inline_tail` once the schedule exists, and
schedules the fused output where it scheduled its own output: the tail then runs on each output
tile while it is in registers or L1.

The epilogue is not part of the template's arguments, so the workload key (and every tuning
record of the anchor) is the same with and without one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from templtune import te
from templtune.errors import TempltuneError
from templtune.te.tensor import ComputeOp

__all__ = ["EpilogueInput", "Epilogue", "EpilogueError", "Fused", "attach", "inline_tail",
           "output_stage"]


class EpilogueError(TempltuneError, ValueError):
    """An epilogue that does not fit the template output it is applied to."""


@dataclass(frozen=True, slots=True)
class EpilogueInput:
    """One extra input the tail reads (a bias vector, a residual tensor)."""

    shape: tuple[int, ...]
    dtype: str = "float32"


@dataclass(frozen=True, slots=True)
class Epilogue:
    """An element-wise tail: ``build(out, extras)`` returns the fused output tensor, computed
    from the anchor's output ``out`` and one placeholder per entry of ``inputs``.

    ``key`` identifies the computation (equal keys: equal tails; a kernel cache key), ``ops``
    names its ops (kernel names, messages). The fused output must have the anchor's shape.
    """

    inputs: tuple[EpilogueInput, ...]
    build: Callable[[te.Tensor, Sequence[te.Tensor]], te.Tensor] = field(compare=False)
    key: str
    ops: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "_".join(o.replace(".", "_") for o in self.ops) or "epilogue"


@dataclass(frozen=True, slots=True)
class Fused:
    """What :func:`attach` gives a template: the tensor its output stage now computes
    (``output``), the extra input placeholders (kernel arguments after the template's own
    inputs) and the template's original output (``anchor``)."""

    output: te.Tensor
    extras: tuple[te.Tensor, ...]
    anchor: te.Tensor

    @property
    def fused(self) -> bool:
        return self.output is not self.anchor


def attach(out: te.Tensor, epilogue: Epilogue | None) -> Fused:
    """The fused output of ``out`` under ``epilogue`` (``out`` itself when None).

    Raises
    ------
    EpilogueError
        The tail's output has another shape or dtype than ``out``.
    """
    if epilogue is None:
        return Fused(out, (), out)
    extras = tuple(te.placeholder(i.shape, dtype=i.dtype, name=f"epilogue_in{k}")
                   for k, i in enumerate(epilogue.inputs))
    final = epilogue.build(out, extras)
    shape = tuple(int(d.value) if hasattr(d, "value") else int(d) for d in final.shape)
    want = tuple(int(d.value) if hasattr(d, "value") else int(d) for d in out.shape)
    if shape != want or final.dtype != out.dtype:
        raise EpilogueError(f"epilogue {epilogue.name} gives {shape} {final.dtype}, but the "
                            f"template's output is {want} {out.dtype}")
    return Fused(final, extras, out)


def _between(final: te.Tensor, anchor: te.Tensor) -> list[ComputeOp]:
    """The compute ops on paths from ``final`` down to ``anchor`` (neither included)."""
    found: dict[int, ComputeOp] = {}
    reach: dict[int, bool] = {}

    def visit(op: Any) -> bool:
        if op is anchor.op:
            return True
        if id(op) in reach:
            return reach[id(op)]
        hit = False
        for t in op.input_tensors:
            hit = visit(t.op) or hit
        reach[id(op)] = hit
        if hit and op is not final.op and isinstance(op, ComputeOp):
            found[id(op)] = op
        return hit

    visit(final.op)
    return list(found.values())


def inline_tail(s: Any, fused: Fused, anchor_too: bool = False) -> None:
    """Inline the tail's intermediate stages into the fused output (and the template's own
    output stage too when ``anchor_too``: an element-wise unpack such as NCHWc -> NCHW).

    After this the template schedules ``fused.output`` as it scheduled its output; a reduction
    it wrote through a cache now computes at that stage's tile instead (see
    :func:`output_stage`)."""
    if not fused.fused:
        return
    for op in _between(fused.output, fused.anchor):
        s[op].compute_inline()
    if anchor_too:
        s[fused.anchor.op].compute_inline()


def output_stage(s: Any, fused: Fused) -> tuple[Any, Any]:
    """``(output tensor, accumulator tensor)`` of a reduction template that writes its result
    through a register-resident cache: without an epilogue the cache is ``cache_write(anchor)``
    and the output is the anchor; with one the anchor itself accumulates, computed at the fused
    output's tile, and the fused output (the tail inlined) is the output stage."""
    if not fused.fused:
        return fused.anchor, s.cache_write(fused.anchor, "global")
    inline_tail(s, fused)
    return fused.output, fused.anchor
