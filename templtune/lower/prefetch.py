"""Software prefetch (``Stage.prefetch``), after TVM's InjectPrefetch.

Lowering marks the loop of ``s[op].prefetch(tensor, var, offset)`` with a ``prefetch``
annotation naming the tensor's buffer. This pass bounds, for each mark, the elements of the
buffer that the loop's body reads when the loop variable is ``var + offset`` (the reads'
flat indices over the inner loops' ranges) and puts, at the start of the body, a loop of
``prefetch`` calls, one cache line apart from the range's first element to its last
(``Evaluate(Call("int32", "prefetch", (Load(buffer, index),)))``; the load is never
performed). A range the analysis cannot bound gets no prefetch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from templtune import dtype as dt
from templtune.lower.ir import Buffer, Evaluate, For, ForKind, LetStmt, Load, Stmt, seq
from templtune.te.bound import Interval, eval_interval, union
from templtune.te.expr import BinOpKind, Call, PrimExpr, Range, Var, binary, const
from templtune.te.functor import Mutator, handles, post_order, substitute
from templtune.te.simplify import Simplifier

logger = logging.getLogger("templtune.lower")

#: the loop annotation lowering sets: ``(PREFETCH, (buffer, offset))``
PREFETCH = "prefetch"
#: bytes of a cache line: one prefetch each
LINE_BYTES = 64

__all__ = ["PREFETCH", "LINE_BYTES", "inject_prefetch", "read_range"]


def read_range(body: Stmt, buffer: Buffer, at: Mapping[Var, PrimExpr],
               ranges: Mapping[Var, Any] | None = None) -> Interval | None:
    """The flat indices of ``buffer`` that ``body`` reads, its loops over their ranges and
    the variables of ``at`` replaced by their values; ``None`` where a read is unbounded or
    there is none."""
    dom: dict[Var, Interval] = {}
    lets: dict[Var, PrimExpr] = {}
    indices: list[PrimExpr] = []
    nodes = list(post_order(body))
    # an inner mark's prefetches name addresses, they read nothing
    fetched = {id(n.args[0]) for n in nodes if isinstance(n, Call) and n.name == "prefetch"}
    for node in nodes:
        if isinstance(node, For):
            dom[node.loop_var] = Interval.from_range(Range(node.min, node.extent))
        elif isinstance(node, LetStmt):
            lets[node.var] = node.value
        elif isinstance(node, Load) and node.buffer is buffer and id(node) not in fetched:
            if dt.lanes(node.index.dtype) != 1:
                return None
            indices.append(node.index)
    if not indices:
        return None
    # NOTE: post order meets an inner let before the outer one its value may use: resolved
    # outermost first, each value is then free of lets
    for var in reversed(list(lets)):
        lets[var] = substitute(lets[var], lets)
    region: Interval | None = None
    for index in indices:
        iv = eval_interval(substitute(substitute(index, lets), at), dom, ranges)
        if not iv.is_bounded:
            return None
        region = iv if region is None else union(region, iv)
    return region


class _Inject(Mutator):
    def __init__(self, ranges: Mapping[Var, Any] | None) -> None:
        self.ranges = ranges
        self.simp = Simplifier(ranges)

    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        body = self.visit(node.body)
        marks = [v for k, v in node.annotations if k == PREFETCH]
        if not marks:
            return node if body is node.body else dataclasses.replace(node, body=body)
        fetches = [self._fetch(node, body, buf, k) for buf, k in marks]
        keep = tuple((k, v) for k, v in node.annotations if k != PREFETCH)
        return dataclasses.replace(node, body=seq(*fetches, body), annotations=keep)

    def _fetch(self, loop: For, body: Stmt, buf: Buffer, offset: int) -> Stmt | None:
        ahead = {loop.loop_var: loop.loop_var + offset}
        region = read_range(body, buf, ahead, self.ranges)
        if region is None:
            logger.debug("prefetch of %s at %s: reads not bounded, none emitted", buf.name,
                         loop.loop_var.name)
            return None
        per_line = max(1, LINE_BYTES // dt.itemsize(buf.dtype))
        lo, hi = self.simp.visit(region.min), self.simp.visit(region.max)
        # NOTE: steps of one line from lo, the last at hi: every line of [lo, hi] is met
        # whatever the buffer's alignment (a step cannot skip a line)
        steps = self.simp.visit((hi - lo) // per_line + 2)
        line = Var(f"{loop.loop_var.name}_pf", "int32")
        at = self.simp.visit(binary(BinOpKind.MIN, lo + line * per_line, hi))
        fetch = Evaluate(Call("int32", "prefetch", (Load(buf, at),)))
        return For(line, const(0), steps, ForKind.SERIAL, fetch)


def inject_prefetch(body: Stmt, ranges: Mapping[Var, Any] | None = None) -> Stmt:
    """Apply every ``prefetch`` mark of ``body`` (see the module docstring); ``ranges``: the
    bound result's variable ranges, facts for the simplifier."""
    return _Inject(ranges).visit(body)  # type: ignore[no-any-return]
