"""The region an attached stage must compute: what its consumers read inside the attach loop.

The half of bound inference that looks at a stage's consumers rather than at its own loops:
the storage scope implied by the enclosing thread loops, which of those loops are relaxed (TVM's
rank rule), and the union of the consumers' reads as an interval per data axis. Separate from
the per-stage driver in :mod:`templtune.schedule.bound`, which calls
:func:`_region_from_consumers` for every ``compute_at`` stage.
"""

from __future__ import annotations

import logging
from typing import Any

from templtune.errors import LoweringError
from templtune.schedule.bound_result import StageBound
from templtune.te.bound import Interval, eval_interval, union
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    IntImm,
    IterVar,
    PrimExpr,
    TensorLoad,
    Var,
    const,
    const_int,
)
from templtune.te.functor import post_order, substitute
from templtune.te.linear import INF
from templtune.te.simplify import Simplifier, const_bound
from templtune.te.tensor import Tensor

logger = logging.getLogger("templtune.schedule")

_SCOPE_RANK = {"global": 0, "shared": 1, "warp": 2, "local": 3}


def _thread_rank(tag: str) -> int:
    return 0 if tag.startswith("blockIdx") else 1


# NOTE: one shared instance (bound.py uses it too); symbolic extents mention only shape
# variables, which never get ranges
_SIMP = Simplifier()


def _last(ext: int | PrimExpr) -> Any:
    """The last index of an extent, as an int or an expression."""
    return ext - 1 if type(ext) is int else _SIMP.visit(ext - 1)


def _infer_scope(path: list[tuple[StageBound, IterVar]]) -> str:
    rank = -1
    for s2, lv in path:
        tiv = s2.thread_of(lv)
        if tiv is not None:
            rank = max(rank, _thread_rank(tiv.thread_tag))
    return ("global", "shared", "local")[rank + 1]


def _relax_in_prefix(info: StageBound, s2: StageBound, lv: IterVar) -> bool:
    tiv = s2.thread_of(lv)
    if tiv is None:
        return False
    rank = _SCOPE_RANK.get(info.scope, 0)
    return rank <= _thread_rank(tiv.thread_tag)


_DIVMOD = (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD)


def _splits_and_rejoins(e: PrimExpr) -> bool:
    """Whether ``e`` has both a floor division and a floor modulo."""
    kinds: set[BinOpKind] = set()
    for x in post_order(e):
        if isinstance(x, BinOp) and x.op in _DIVMOD:
            kinds.add(x.op)
            if len(kinds) == 2:
                return True
    return False


def _region_from_consumers(info: StageBound, readers: dict[Tensor, list[StageBound]],
                           reads: dict[tuple[int, Tensor], list[TensorLoad]],
                           var_ranges: dict[Var, tuple[int, int]]) -> None:
    op = info.op
    prefix = info.path
    npre = len(prefix)
    region: list[Interval | None] = [None] * len(op.axis)
    any_reader = False
    fixed_ranges: dict[Var, tuple[int, float]] = {}  # INF above a symbolic extent
    for s2, lv in prefix:
        v = s2.loop_var.get(lv)
        if isinstance(v, Var):
            e = s2.ext[lv]
            fixed_ranges[v] = (0, e - 1 if type(e) is int else INF)
    for k in range(op.num_outputs):
        t = op.output(k)
        for c in readers.get(t, []):
            loops = c.full_loops()
            if len(loops) < npre or any(a[0] is not b[0] or a[1] is not b[1]
                                        for a, b in zip(loops, prefix)):
                raise LoweringError(
                    f"stage {op.name} is computed at {info.stage.attach_stage.op.name}."  # type: ignore[union-attr]
                    f"{info.stage.attach_ivar.var.name} but its consumer {c.op.name} is not "  # type: ignore[union-attr]
                    f"inside that loop")
            dom: dict[Any, Interval] = {}
            for i, (s2, lv) in enumerate(loops):
                v = s2.loop_var.get(lv)
                if not isinstance(v, Var):
                    continue
                if i >= npre or _relax_in_prefix(info, s2, lv):
                    last = _last(s2.ext[lv])
                    dom[v] = Interval(const(0), const(last) if type(last) is int else last)
            vmap = {r.var: c.root_val[r] for r in c.roots}
            for load in reads.get((id(c), t), []):
                any_reader = True
                for d, idx in enumerate(load.indices):
                    e = substitute(idx, vmap)
                    if _splits_and_rejoins(idx):
                        # NOTE: (p // w) * w + p % w (a view of fused pixels as rows and back)
                        # is p; interval arithmetic on the two halves would give whole rows
                        e = Simplifier().visit(e)
                    iv = eval_interval(e, dom, fixed_ranges)
                    region[d] = iv if region[d] is None else union(region[d], iv)  # type: ignore[arg-type]
    if not any_reader:
        logger.debug("stage %s is attached but never read; computing its whole shape", op.name)
        return
    simp = Simplifier(fixed_ranges)
    for d, a in enumerate(op.axis):
        full = info.ext[a]
        got = region[d]
        if got is None or got.min is None or got.max is None:
            continue
        lo, hi = simp.visit(got.min), simp.visit(got.max)
        ext_e = simp.visit(hi - lo + 1)
        ext = const_int(ext_e)
        if ext is None:
            b = const_bound(ext_e, fixed_ranges)[1]
            if b == float("inf"):
                continue
            ext = int(b)
        lo_c, hi_c = const_int(lo), const_int(hi)
        sym = type(full) is not int
        if not sym and (ext >= full or (lo_c is not None and lo_c <= 0 and hi_c is not None
                                        and hi_c >= full - 1)):
            continue  # covers the whole axis anyway
        if lo_c is not None and hi_c is not None:
            # NOTE: a symbolic axis may be shorter than the region; the nest guards it
            lo_c, hi_c = max(lo_c, 0), (hi_c if sym else min(hi_c, full - 1))
            info.root_min[a] = const(lo_c)
            info.ext[a] = hi_c - lo_c + 1
            continue
        info.root_min[a] = lo if not isinstance(lo, IntImm) else const(lo.value)
        info.ext[a] = max(ext, 1)
