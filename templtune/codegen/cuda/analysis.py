"""Small expression analyses used by the CUDA passes and renderer.

Only what the CUDA backend needs: which variables / buffers a subtree touches, whether an integer
expression is provably non-negative (so ``floordiv`` may render as C ``/``), and whether it is
provably a multiple of a constant (so a ``Ramp`` may load as ``float4``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from templtune.errors import CodegenError
from templtune.lower.ir import Buffer, Load, Ramp, Store
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Cast,
    FloatImm,
    IntImm,
    PrimExpr,
    Var,
    binary,
    const,
    const_int,
)
from templtune.te.functor import Mutator, _child_list, handles


def const_value(e: Any, what: str) -> int:
    """The Python int of a constant integer expression; CodegenError naming ``what`` otherwise."""
    v = const_int(e)
    if v is None:
        raise CodegenError(f"CUDA codegen needs a constant {what}, got {e}")
    return v


def buffer_size(buf: Buffer) -> int:
    """Number of elements of a buffer with a constant shape."""
    n = 1
    for s in buf.shape:
        n *= const_value(s, f"shape for buffer {buf.name}")
    return n


def iter_nodes(root: Any) -> Any:
    """Every node of the tree under ``root`` (pre-order, fast)."""
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(node_children(n))


def accessed_buffers(node: Any) -> set[Buffer]:
    """Buffers loaded or stored anywhere in ``node``."""
    out: set[Buffer] = set()
    for n in iter_nodes(node):
        if isinstance(n, (Load, Store)):
            out.add(n.buffer)
    return out


def touches(node: Any, vars_: set[Var], bufs: set[Buffer]) -> bool:
    """True when ``node`` references one of ``vars_`` or accesses one of ``bufs``."""
    for n in iter_nodes(node):
        if isinstance(n, Var) and n in vars_:
            return True
        if isinstance(n, (Load, Store)) and n.buffer in bufs:
            return True
    return False


def free_vars(node: Any) -> set[Var]:
    return {n for n in iter_nodes(node) if isinstance(n, Var)}


def is_nonneg(e: PrimExpr, nonneg_vars: Iterable[Var]) -> bool:
    """Conservatively prove ``e >= 0`` given variables known to be non-negative."""
    known = nonneg_vars if isinstance(nonneg_vars, (set, frozenset, dict)) else set(nonneg_vars)
    return _nonneg(e, known)


def _nonneg(e: PrimExpr, known: Any) -> bool:
    if isinstance(e, IntImm):
        return e.value >= 0
    if isinstance(e, Var):
        return e in known
    if isinstance(e, Cast):
        return _nonneg(e.value, known)
    if isinstance(e, BinOp):
        if e.op in (BinOpKind.ADD, BinOpKind.MUL, BinOpKind.DIV, BinOpKind.FLOORDIV,
                    BinOpKind.MIN, BinOpKind.MAX):
            if e.op is BinOpKind.MAX:
                return _nonneg(e.a, known) or _nonneg(e.b, known)
            return _nonneg(e.a, known) and _nonneg(e.b, known)
        if e.op is BinOpKind.FLOORMOD:
            b = const_int(e.b)
            return b is not None and b > 0
    return False


def divisible(e: PrimExpr, k: int) -> bool:
    """Conservatively prove that integer expression ``e`` is a multiple of ``k``."""
    if k == 1:
        return True
    if isinstance(e, IntImm):
        return e.value % k == 0
    if isinstance(e, BinOp):
        if e.op in (BinOpKind.ADD, BinOpKind.SUB):
            return divisible(e.a, k) and divisible(e.b, k)
        if e.op is BinOpKind.MUL:
            return divisible(e.a, k) or divisible(e.b, k)
    if isinstance(e, Ramp):
        return divisible(e.base, k)
    return False


# ------------------------------------------------------------------ traversal
# NOTE: the one functor (templtune.te.functor) serves the CUDA passes too: its node test and
# field lists are cached per class, and its dispatch is one table lookup per node.


def node_children(node: Any) -> list[Any]:
    """The child nodes (expressions and statements) of ``node``."""
    return _child_list(node)


class _Subst(Mutator):
    def __init__(self, vmap: dict[Var, PrimExpr]) -> None:
        self.vmap = vmap

    @handles(Var)
    def visit_Var(self, node: Var) -> PrimExpr:
        return self.vmap.get(node, node)


def fast_substitute(node: Any, vmap: dict[Var, PrimExpr]) -> Any:
    """Replace variables in ``node`` (expression or statement)."""
    return _Subst(vmap).visit(node) if vmap else node


class RefCache:
    """Memoised set of the variables and buffers each subtree references (nodes are immutable,
    so a cache keyed by identity stays valid while the nodes are alive; it keeps them alive)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, frozenset[Any]]] = {}

    def refs(self, node: Any) -> frozenset[Any]:
        hit = self._cache.get(id(node))
        if hit is not None:
            return hit[1]
        out: set[Any] = set()
        if isinstance(node, Var):
            out.add(node)
        elif isinstance(node, (Load, Store)):
            out.add(node.buffer)
        for c in node_children(node):
            out |= self.refs(c)
        fs = frozenset(out)
        self._cache[id(node)] = (node, fs)
        return fs

    def touches(self, node: Any, targets: set[Any] | frozenset[Any]) -> bool:
        return not self.refs(node).isdisjoint(targets)


class _Fold(Mutator):
    @handles(BinOp)
    def visit_BinOp(self, node: BinOp) -> PrimExpr:
        node = self.generic(node)
        a, b = node.a, node.b
        ca = const_int(a) if isinstance(a, IntImm) and a.dtype != "bool" else None
        cb = const_int(b) if isinstance(b, IntImm) and b.dtype != "bool" else None
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            if node.op in (BinOpKind.DIV, BinOpKind.FLOORDIV, BinOpKind.FLOORMOD) and not b.value:
                return node
            return binary(node.op, a, b)
        if node.op is BinOpKind.ADD:
            if ca == 0:
                return b
            if cb == 0:
                return a
        elif node.op is BinOpKind.SUB and cb == 0:
            return a
        elif node.op is BinOpKind.MUL:
            if ca == 1:
                return b
            if cb == 1:
                return a
            if ca == 0 or cb == 0:
                return const(0, node.dtype)
        elif node.op in (BinOpKind.FLOORDIV, BinOpKind.DIV) and cb == 1:
            return a
        return node


def fold_constants(node: Any) -> Any:
    """Fold integer constant arithmetic left behind by substitution (``0 * 8 + x`` -> ``x``)."""
    return _Fold().visit(node)
