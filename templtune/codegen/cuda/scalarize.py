"""Scalarization of vector statements before CUDA rendering.

A vector store that is not an aligned ``float2``/``float4`` copy becomes an unrolled loop over
its lanes, so the renderer only meets scalar statements and whole-vector copies. Separate from
:mod:`templtune.codegen.cuda.render` because it rewrites loop IR, it does not print it.
"""

from __future__ import annotations

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import divisible
from templtune.codegen.cuda.csyntax import _VEC_TYPES
from templtune.errors import CodegenError
from templtune.lower.ir import (
    Broadcast,
    For,
    ForKind,
    IfThenElse,
    Load,
    Ramp,
    Shuffle,
    Stmt,
    Store,
    seq,
)
from templtune.te.dispatch import Dispatch
from templtune.te.expr import BinOp, Call, Cast, Not, PrimExpr, Select, Var, const, const_int
from templtune.te.functor import Mutator, handles, post_order
from templtune.te.simplify import Simplifier

_LANE: Dispatch[PrimExpr] = Dispatch(
    "CUDA scalarization", missing=lambda e: CodegenError(f"cannot scalarize vector expression {e}"))


def _lane(e: PrimExpr, lane: PrimExpr) -> PrimExpr:
    """The scalar expression for one lane of vector expression ``e``."""
    if dt.lanes(e.dtype) == 1 and not isinstance(e, (Ramp, Broadcast)):
        return e
    return _LANE(lane, e)


@_LANE.register(Ramp)
def _lane_ramp(lane: PrimExpr, e: Ramp) -> PrimExpr:
    stride = const_int(e.stride)
    return e.base + lane if stride == 1 else e.base + e.stride * lane


@_LANE.register(Broadcast)
def _lane_broadcast(lane: PrimExpr, e: Broadcast) -> PrimExpr:
    return e.value


@_LANE.register(Shuffle)
def _lane_shuffle(lane: PrimExpr, e: Shuffle) -> PrimExpr:
    k = const_int(lane)
    if k is None:  # visit_Store unrolls the lanes of a store that reads a shuffle
        raise CodegenError(f"a shuffle's lane must be constant, not {lane}")
    return _lane(e.vector, const(e.indices[k]))


@_LANE.register(Load)
def _lane_load(lane: PrimExpr, e: Load) -> PrimExpr:
    pred = None if e.predicate is None else _lane(e.predicate, lane)
    if pred is not None and const_int(lane) is not None \
            and const_int(Simplifier().visit(pred)) == 1:
        pred = None  # a window's lane inside its span (the mask is constant per lane)
    return Load(e.buffer, _lane(e.index, lane), pred)


@_LANE.register(BinOp)
def _lane_binop(lane: PrimExpr, e: BinOp) -> PrimExpr:
    return BinOp(e.op, _lane(e.a, lane), _lane(e.b, lane), dt.element_of(e.dtype))


@_LANE.register(Not)
def _lane_not(lane: PrimExpr, e: Not) -> PrimExpr:
    return Not(_lane(e.a, lane), dt.element_of(e.dtype))


@_LANE.register(Cast)
def _lane_cast(lane: PrimExpr, e: Cast) -> PrimExpr:
    return Cast(dt.element_of(e.dtype), _lane(e.value, lane))


@_LANE.register(Select)
def _lane_select(lane: PrimExpr, e: Select) -> PrimExpr:
    return Select(_lane(e.cond, lane), _lane(e.true_value, lane), _lane(e.false_value, lane),
                  e.guarded)


@_LANE.register(Call)
def _lane_call(lane: PrimExpr, e: Call) -> PrimExpr:
    return Call(dt.element_of(e.dtype), e.name, tuple(_lane(a, lane) for a in e.args))


def _vector_copy_ok(s: Store) -> bool:
    """A contiguous aligned copy of 2 or 4 elements: rendered as one vector access."""
    idx, val = s.index, s.value
    if s.predicate is not None or not isinstance(idx, Ramp) or const_int(idx.stride) != 1:
        return False
    if (dt.element_of(s.buffer.dtype), idx.lanes) not in _VEC_TYPES:
        return False
    if not divisible(idx.base, idx.lanes):
        return False
    if isinstance(val, Load):
        vi = val.index
        return (val.predicate is None and isinstance(vi, Ramp) and const_int(vi.stride) == 1
                and vi.lanes == idx.lanes and val.buffer.dtype == s.buffer.dtype
                and divisible(vi.base, vi.lanes))
    return False


class _OneLane(Mutator):
    """A scalar expression's one-lane shuffles (of a vector reduction) as their lane."""

    @handles(Shuffle)
    def visit_Shuffle(self, node: Shuffle) -> PrimExpr:
        if len(node.indices) != 1:
            raise CodegenError(f"a {len(node.indices)}-lane shuffle in a scalar expression")
        return _lane(node.vector, const(node.indices[0]))


class _Scalarize(Mutator):
    @handles(Store)
    def visit_Store(self, node: Store) -> Stmt:
        lanes = dt.lanes(node.index.dtype)
        if lanes > 1 and _vector_copy_ok(node):
            return node
        shuffled = any(isinstance(n, Shuffle) for n in post_order(node.value))
        if lanes == 1:
            # a reduction across lanes: its last shuffle picks one lane of the tree
            return Store(node.buffer, node.index, _OneLane().visit(node.value),
                         node.predicate) if shuffled else node
        if shuffled:
            # NOTE: a shuffle picks its lanes by a constant table: each lane is its own store,
            # its lane arithmetic folded (the masks of a window's lanes are constants)
            simp = Simplifier()
            return seq(*(simp.visit(self._lane_store(node, const(k))) for k in range(lanes)))
        lv = Var("vec", "int32")
        return For(lv, const(0), const(lanes), ForKind.UNROLLED, self._lane_store(node, lv))

    @staticmethod
    def _lane_store(node: Store, lane: PrimExpr) -> Stmt:
        pred = None if node.predicate is None else _lane(node.predicate, lane)
        body: Stmt = Store(node.buffer, _lane(node.index, lane), _lane(node.value, lane))
        return body if pred is None else IfThenElse(pred, body)


def scalarize(stmt: Stmt) -> Stmt:
    """Turn every vector store that is not an aligned float2/float4 copy into a lane loop."""
    return _Scalarize().visit(stmt)
