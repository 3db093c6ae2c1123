"""Loop-IR passes: unrolling and the cleanup after substitution (vectorization is in
:mod:`templtune.lower.vectorize`).

* :func:`unroll_loops` expands ``UNROLLED`` loops with constant extents (or keeps them
  ``UNROLLED`` for the backend when ``pragma_unroll_explicit`` is 0) and applies the
  ``pragma_auto_unroll_max_step`` pragma: serial loops below the pragma whose total step count
  is at most the value are unrolled too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    seq,
)
from templtune.te.expr import (
    Call,
    PrimExpr,
    Var,
    const,
    const_int,
)
from templtune.te.functor import Mutator, _replace, children, handles
from templtune.te.simplify import Simplifier

# ------------------------------------------------------------------------------ unrolling


def _is_true(c: PrimExpr) -> bool | None:
    if isinstance(c, Call) and c.name == "likely" and len(c.args) == 1:
        c = c.args[0]
    v = const_int(c)
    return None if v is None else bool(v)


class _Cleanup(Mutator):
    """Simplify after substitution; drop ifs whose condition became constant."""

    def __init__(self, ranges: Mapping[Var, tuple[int, int]] | None = None) -> None:
        self.simp = Simplifier(ranges)

    def visit(self, node: Any) -> Any:
        if isinstance(node, PrimExpr):
            return self.simp.visit(node)
        return super().visit(node)

    @handles(For)
    def visit_For(self, node: For) -> Stmt:
        # NOTE: the loop's variable is a binding, not a use: a thread index of extent 1 has the
        # range (0, 0), and simplifying it like an expression would bind the constant 0.
        return _replace(node, {"min": self.visit(node.min), "extent": self.visit(node.extent),
                               "body": self.visit(node.body)})

    @handles(LetStmt)
    def visit_LetStmt(self, node: LetStmt) -> Stmt:
        return _replace(node, {"value": self.visit(node.value), "body": self.visit(node.body)})

    @handles(IfThenElse)
    def visit_IfThenElse(self, node: IfThenElse) -> Stmt | None:
        c = self.visit(node.condition)
        t = _is_true(c)
        if t is True:
            return self.visit(node.then_case)
        if t is False:
            return self.visit(node.else_case) if node.else_case is not None else SeqStmt(())
        new = self.generic(node)
        return new


class _SubstOne(Mutator):
    """``substitute(node, {var: value})`` that skips subtrees not using ``var``. Which subtrees
    use it is remembered by node identity, so substituting each value of an unrolled loop into
    the same body walks only the paths that lead to the variable."""

    def __init__(self, var: Var) -> None:
        self.var = var
        self.value: PrimExpr = var
        self._uses: dict[Any, bool] = {var: True}

    def uses(self, node: Any) -> bool:
        r = self._uses.get(node)
        if r is None:
            r = False
            for c in children(node):
                if self.uses(c):
                    r = True  # keep going: fill the memo for every child
            self._uses[node] = r
        return r

    def subst(self, node: Any, value: PrimExpr) -> Any:
        self.value = value
        self._done: dict[Any, Any] = {}
        return self.visit(node)

    def visit(self, node: Any) -> Any:
        if not self.uses(node):
            return node
        if node is self.var:
            return self.value
        # NOTE: a subtree shared by several parents (a store index read back by its load) is
        # rebuilt once, so the simplifier's identity memo also sees it once
        r = self._done.get(node)
        if r is None:
            r = self._done[node] = self.generic(node)
        return r


class _Unroller:
    """Returns ``(stmt, steps, blocked)``: ``steps`` counts stores executed, ``blocked`` says the
    statement holds thread-binding loops or allocations, which are never duplicated."""

    def __init__(self, ranges: Mapping[Var, tuple[int, int]] | None = None) -> None:
        self.clean = _Cleanup(ranges)

    def run(self, s: Stmt, max_step: int, explicit: bool) -> tuple[Stmt, int, bool]:
        if isinstance(s, SeqStmt):
            parts = [self.run(x, max_step, explicit) for x in s.seq]
            return (seq(*[p for p, _, _ in parts]), sum(n for _, n, _ in parts),
                    any(b for _, _, b in parts))
        if isinstance(s, For):
            ms, ex = max_step, explicit
            for k, v in s.annotations:
                if k == "pragma_auto_unroll_max_step":
                    ms = int(v)
                elif k == "pragma_unroll_explicit":
                    ex = bool(v)
            body, steps, blocked = self.run(s.body, ms, ex)
            if isinstance(body, SeqStmt) and not body.seq:
                return body, 0, blocked  # an empty loop
            n = const_int(s.extent)
            total = steps * (n if n is not None else 1 << 30)
            blocked = blocked or s.kind is ForKind.THREAD_BINDING
            unroll = n is not None and (s.kind is ForKind.UNROLLED or (
                s.kind is ForKind.SERIAL and ms > 0 and total <= ms and not blocked))
            if unroll and n is not None:
                if ex and not blocked:
                    mn = const_int(s.min) or 0
                    sub = _SubstOne(s.loop_var)
                    copies = [self.clean.visit(sub.subst(body, const(mn + i)))
                              for i in range(n)]
                    return seq(*copies), total, blocked
                return _replace(s, {"body": body, "kind": ForKind.UNROLLED}), total, blocked
            new = s if body is s.body else _replace(s, {"body": body})
            return new, total, blocked
        if isinstance(s, IfThenElse):
            t, a, b1 = self.run(s.then_case, max_step, explicit)
            e: Stmt | None = None
            b, b2 = 0, False
            if s.else_case is not None:
                e, b, b2 = self.run(s.else_case, max_step, explicit)
            new = s if t is s.then_case and e is s.else_case else _replace(
                s, {"then_case": t, "else_case": e})
            return new, a + b, b1 or b2
        if isinstance(s, (Allocate, LetStmt, AttrStmt)):
            body, n, blocked = self.run(s.body, max_step, explicit)
            new = s if body is s.body else _replace(s, {"body": body})
            return new, n, blocked or isinstance(s, Allocate)
        return s, 1, False


def unroll_loops(s: Stmt, max_step: int = 0, explicit: bool = True,
                 ranges: Mapping[Var, tuple[int, int]] | None = None) -> Stmt:
    """Unroll ``UNROLLED`` loops and apply ``auto_unroll_max_step`` pragmas.

    Parameters
    ----------
    s : Stmt
        The loop nest.
    max_step, explicit : int, bool
        Defaults outside any pragma (TVM's: no auto-unrolling, explicit expansion).
    ranges : Mapping[Var, (lo, hi)], optional
        Loop-variable ranges for simplifying the indices of expanded copies.
    """
    return _Unroller(ranges).run(s, max_step, explicit)[0]
