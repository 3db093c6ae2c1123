"""Loop partitioning: peel the partial last iteration of a loop split by a non-divisor.

``split(x, factor=6)`` of a 49-long axis gives ``x.outer`` 9 iterations, and every statement
below it that touches ``x`` runs under ``if (likely(x.outer * 6 + x.inner < 49))``. In a
register-blocked micro-kernel those guards sit between the FMAs of the unrolled block, so the
whole block pays for the one partial iteration. :func:`partition_loops` splits such a serial
loop into the full iterations, where every guard is provably true and is dropped, and the
last one, with the loop variable a constant, where the guards fold once the block is unrolled
(TVM's ``LoopPartition`` for this case). Guards that are not provably true on all but the last
iteration (a padding test at the front, a symbolic bound) leave the loop as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from templtune.lower.ir import Allocate, AttrStmt, For, ForKind, IfThenElse, LetStmt, SeqStmt, Stmt
from templtune.lower.passes import _Cleanup
from templtune.te.expr import Call, PrimExpr, Var, const, const_int
from templtune.te.functor import (
    Mutator,
    _replace,
    collect,
    collect_vars,
    handles,
    post_order,
    substitute,
)
from templtune.te.simplify import Simplifier

Ranges = dict[Var, tuple[int, int]]


def _guard(c: PrimExpr) -> PrimExpr | None:
    """The condition of a ``likely(...)`` guard (what bound checks produce), else None."""
    if isinstance(c, Call) and c.name == "likely" and len(c.args) == 1:
        return c.args[0]
    return None


def _guards(s: Stmt, ranges: Ranges) -> list[tuple[PrimExpr, Ranges]]:
    """Every guard condition in ``s`` with the ranges of the loops between ``s`` and it
    (added to ``ranges``); a loop without constant bounds adds none."""
    out: list[tuple[PrimExpr, Ranges]] = []

    def walk(x: Stmt, r: Ranges) -> None:
        if isinstance(x, SeqStmt):
            for y in x.seq:
                walk(y, r)
        elif isinstance(x, For):
            lo, n = const_int(x.min), const_int(x.extent)
            inner = r if lo is None or n is None or n < 1 else {**r, x.loop_var: (lo, lo + n - 1)}
            walk(x.body, inner)
        elif isinstance(x, IfThenElse):
            g = _guard(x.condition)
            if g is not None:
                out.append((g, r))
            walk(x.then_case, r)
            if x.else_case is not None:
                walk(x.else_case, r)
        elif isinstance(x, (Allocate, AttrStmt, LetStmt)):
            walk(x.body, r)

    walk(s, ranges)
    return out


def _rebinds(s: Stmt, v: Var) -> bool:
    # NOTE: a stage's loop may reuse a consumer's variable (an extent-1 axis); the peeled copy
    # substitutes a constant for v, which must not reach a loop that binds it again
    return bool(collect(s, lambda x: isinstance(x, For) and x.loop_var is v))


def _has_thread_loop(s: Stmt) -> bool:
    return bool(collect(s, lambda x: isinstance(x, For) and x.kind is ForKind.THREAD_BINDING))


class _Ranged(Mutator):
    """A statement mutator that knows the constant range of every enclosing loop."""

    def __init__(self, ranges: Mapping[Var, tuple[int, int]] | None) -> None:
        self.ranges: Ranges = dict(ranges or {})

    def visit(self, node: Any) -> Any:
        if isinstance(node, PrimExpr):
            return node
        return super().visit(node)

    @contextmanager
    def known(self, v: Var, lo: int, hi: int) -> Iterator[None]:
        """``v`` in ``[lo, hi]`` within the block (its outer range restored after)."""
        saved = self.ranges.get(v)
        self.ranges[v] = (lo, hi)
        try:
            yield
        finally:
            if saved is None:
                self.ranges.pop(v, None)
            else:
                self.ranges[v] = saved

    def loop(self, node: For, lo: int, n: int) -> Stmt:
        """Visit ``node`` (``lo``, ``n``: its constant bounds) with its range known."""
        with self.known(node.loop_var, lo, lo + n - 1):
            return self.generic(node)

    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        lo, n = const_int(node.min), const_int(node.extent)
        if lo is None or n is None or n < 1:
            return self.generic(node)
        return self.loop(node, lo, n)


class _DropGuards(_Ranged):
    """Replace the guards provably true under the enclosing loops' ranges by their body."""

    @handles(IfThenElse)
    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        g = _guard(node.condition)
        if g is not None and _proved(g, self.ranges):
            return self.visit(node.then_case)
        return self.generic(node)


def _proved(cond: PrimExpr, ranges: Ranges) -> bool:
    used = collect_vars(cond)
    r = Simplifier({v: b for v, b in ranges.items() if v in used}).visit(cond)
    v = const_int(r)
    return v is not None and bool(v)


class _Partition(_Ranged):
    def loop(self, node: For, lo: int, n: int) -> Stmt:
        peeled = self._peel(node, lo, n) if node.kind is ForKind.SERIAL and n >= 2 else None
        return peeled if peeled is not None else super().loop(node, lo, n)

    def _peel(self, node: For, lo: int, n: int) -> Stmt | None:
        v = node.loop_var
        mine = [(g, r) for g, r in _guards(node.body, {}) if v in collect_vars(g)]
        if not mine or _has_thread_loop(node.body) or _rebinds(node.body, v):
            return None
        head = {**self.ranges, v: (lo, lo + n - 2)}
        if not all(_proved(g, {**head, **r}) for g, r in mine):
            return None
        if all(_proved(g, {**self.ranges, v: (lo, lo + n - 1), **r}) for g, r in mine):
            return None  # no partial iteration: the guards are the simplifier's business
        with self.known(v, lo, lo + n - 2):
            body = _DropGuards(self.ranges).visit(self.visit(node.body))
        main = _replace(node, {"extent": const(n - 1, node.extent.dtype), "body": body})
        last = lo + n - 1
        with self.known(v, last, last):
            # NOTE: no ranges for the cleanup: it would replace an extent-1 loop's variable by
            # its value, binding occurrences too; it only folds what the substitution made
            # constant
            tail = _Cleanup().visit(self.visit(substitute(node.body, {v: const(last, v.dtype)})))
        return SeqStmt((main, tail))


def partition_loops(s: Stmt, ranges: Mapping[Var, tuple[int, int]] | None = None) -> Stmt:
    """Peel the last iteration off every serial loop whose guards hold on all the others.

    Parameters
    ----------
    s : Stmt
        The loop nest, before vectorization and unrolling (which then see guard-free bodies
        in the full iterations and constant guards in the peeled one).
    ranges : Mapping[Var, (lo, hi)], optional
        Inclusive ranges of variables bound outside ``s`` (bound inference's loop ranges).

    Returns
    -------
    Stmt
        ``s`` with each such loop ``for v in [lo, lo + n)`` rewritten as ``for v in
        [lo, lo + n - 1)`` without the guards, followed by its body at ``v = lo + n - 1``.
        Loops with no guard on their variable, thread-bound bodies and guards that fail
        before the last iteration are left alone.
    """
    if not any(isinstance(x, Call) and x.name == "likely" for x in post_order(s)):
        return s
    return _Partition(ranges).visit(s)
