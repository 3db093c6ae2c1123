"""Access analysis of the operations of a (possibly rewritten) schedule.

Per compute stage: what it reads and with which index expressions, whether it is strictly
inlineable, whether it needs multi-level tiling, its consumers and producers, and element-wise
matching along single-consumer chains. Stages are identified by their index in the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templtune.te.expr import BinOp, BinOpKind, Call, IntImm, Select, TensorLoad, Var
from templtune.te.functor import post_order
from templtune.te.tensor import ComputeOp

_NO_SPLIT_ATTR = "auto_scheduler_no_split_at_inner"
CONST_TENSOR_ATTR = "auto_scheduler_simplify_const_tensor_indices"


@dataclass
class StageAccess:
    """Access facts of one stage."""

    is_placeholder: bool
    is_output: bool = False
    read_from: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    read_by: list[int] = field(default_factory=list)
    is_simple_access: bool = True
    is_strictly_inlineable: bool = False
    needs_multi_level_tiling: bool = False
    has_reduce: bool = False
    spatial_extents: tuple[int, ...] = ()
    reduce_extents: tuple[int, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)


def _axis_of(idx: Any, axis_vars: list[Var]) -> Var | None | bool:
    """The axis variable in ``axis ± const``; True for a constant; None otherwise."""
    if isinstance(idx, IntImm):
        return True
    if isinstance(idx, Var):
        return idx if any(idx is v for v in axis_vars) else None
    if isinstance(idx, BinOp) and idx.op in (BinOpKind.ADD, BinOpKind.SUB):
        if isinstance(idx.a, Var) and isinstance(idx.b, IntImm):
            return _axis_of(idx.a, axis_vars)
        if idx.op is BinOpKind.ADD and isinstance(idx.b, Var) and isinstance(idx.a, IntImm):
            return _axis_of(idx.b, axis_vars)
    return None


def _ext(iv: Any) -> int:
    e = iv.dom.extent if iv.dom is not None else None
    return int(getattr(e, "value", 1)) if e is not None else 1


def analyze(sch: Any) -> list[StageAccess]:
    """Access facts for every stage of te schedule ``sch`` (index-aligned with ``sch.stages``)."""
    index = {id(st.op): k for k, st in enumerate(sch.stages)}
    out: list[StageAccess] = []
    for st in sch.stages:
        op = st.op
        if not isinstance(op, ComputeOp):
            out.append(StageAccess(is_placeholder=True))
            continue
        acc = StageAccess(is_placeholder=False, attrs=dict(op.attrs))
        acc.has_reduce = bool(op.reduce_axis)
        acc.spatial_extents = tuple(_ext(a) for a in op.axis)
        acc.reduce_extents = tuple(_ext(a) for a in op.reduce_axis)
        axis_vars = [a.var for a in op.axis]
        has_branch = has_exp = False
        for b in op.body:
            for n in post_order(b):
                if isinstance(n, TensorLoad):
                    t = sch.resolve(n.tensor)
                    p = index.get(id(t.op))
                    if p is None:
                        continue
                    acc.read_from.setdefault(p, []).append(tuple(n.indices))
                elif isinstance(n, Select):
                    has_branch = True
                elif isinstance(n, Call) and n.name == "exp":
                    has_exp = True
        simple, no_transpose = True, True
        for idx_lists in acc.read_from.values():
            for idx in idx_lists:
                seen: list[Var] = []
                for i in idx:
                    a = _axis_of(i, axis_vars)
                    if a is None:
                        simple = False
                    elif isinstance(a, Var):
                        if any(a is s for s in seen):
                            no_transpose = False
                        seen.append(a)
                order = [next(k for k, v in enumerate(axis_vars) if v is s) for s in seen]
                if order != sorted(order):
                    no_transpose = False
        acc.is_simple_access = simple
        acc.is_strictly_inlineable = (simple and no_transpose and not has_branch
                                      and not has_exp) or not acc.read_from
        if CONST_TENSOR_ATTR not in acc.attrs:
            count = 0
            for idx_lists in acc.read_from.values():
                used: set[int] = set()
                for idx in idx_lists:
                    for i in idx:
                        for n in post_order(i):
                            if isinstance(n, Var):
                                used.add(id(n))
                missing = any(id(a.var) not in used and _ext(a) > 1 for a in op.axis)
                count += 1 if missing else 0
            acc.needs_multi_level_tiling = count >= 2 or (count >= 1 and acc.has_reduce)
        out.append(acc)
    for k, acc in enumerate(out):
        for p in acc.read_from:
            if k not in out[p].read_by:
                out[p].read_by.append(k)
    outputs = {id(op) for op in sch.outputs}
    for k, st in enumerate(sch.stages):
        out[k].is_output = id(st.op) in outputs or (not out[k].read_by
                                                    and not out[k].is_placeholder)
    return out


def elementwise_match(sch: Any, acc: list[StageAccess], producer: int, consumer: int) -> bool:
    """True when ``consumer`` reads ``producer`` element-wise (same shape, each axis in order)."""
    p_op, c_op = sch.stages[producer].op, sch.stages[consumer].op
    if not isinstance(c_op, ComputeOp) or not isinstance(p_op, ComputeOp):
        return False
    if acc[producer].spatial_extents != acc[consumer].spatial_extents:
        return False
    axis_vars = [a.var for a in c_op.axis]
    for idx in acc[consumer].read_from.get(producer, []):
        if len(idx) != len(axis_vars) or any(i is not v for i, v in zip(idx, axis_vars)):
            return False
    return True


def num_common_outer(sch: Any, acc: list[StageAccess], producer: int, consumer: int) -> int:
    """Length of the common prefix of equal extents accessed as ``axis_i`` by the consumer."""
    c_op = sch.stages[consumer].op
    if not isinstance(c_op, ComputeOp):
        return 0
    axis_vars = [a.var for a in c_op.axis]
    n = 0
    pe, ce = acc[producer].spatial_extents, acc[consumer].spatial_extents
    idxs = acc[consumer].read_from.get(producer, [])
    for pos in range(min(len(pe), len(ce))):
        if pe[pos] != ce[pos]:
            break
        if not all(pos < len(ix) and ix[pos] is axis_vars[pos] for ix in idxs):
            break
        n += 1
    return n


def no_split_iters(acc: StageAccess) -> tuple[str, ...]:
    v = acc.attrs.get(_NO_SPLIT_ATTR, ())
    return tuple(v) if isinstance(v, (list, tuple)) else ()
