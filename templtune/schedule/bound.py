"""Bound inference: the region of each stage that its consumers need, and every loop extent.

A stage computed at the root covers its whole shape. A stage attached with ``compute_at`` covers
the union of what its consumers read inside the attach loop: the loops enclosing the attach point
are fixed (the region is symbolic in them), every loop inside it is relaxed over its range. On
GPUs, thread loops enclosing the attach point are relaxed too when the stage's storage is shared
by those threads: ``shared`` covers all threads of a block, ``global`` all blocks, ``local`` only
its own thread (TVM's rank rule).

Stages are processed consumers first (reverse schedule order), so the loops of every consumer
are known when its producers are bounded. The region of an attached stage is computed in
:mod:`templtune.schedule.bound_region`; the result types are in
:mod:`templtune.schedule.bound_result`.
"""

from __future__ import annotations

from typing import Any

from templtune.errors import LoweringError
from templtune.schedule.bound_region import (  # noqa: F401  (re-exported: were defined here)
    _DIVMOD,
    _SCOPE_RANK,
    _SIMP,
    _infer_scope,
    _last,
    _region_from_consumers,
    _relax_in_prefix,
    _splits_and_rejoins,
    _thread_rank,
    logger,
)
from templtune.schedule.bound_result import BoundResult, StageBound
from templtune.schedule.message_passing import _pass_down, _pass_up
from templtune.schedule.relations import Fuse, Split
from templtune.schedule.schedule import Schedule
from templtune.schedule.stage import Stage
from templtune.te.expr import IntImm, IterVar, PrimExpr, TensorLoad, Var, const, const_int
from templtune.te.functor import Mutator, collect_vars, handles, post_order, substitute
from templtune.te.linear import INF
from templtune.te.simplify import Simplifier
from templtune.te.tensor import ComputeOp, Tensor


class _Inliner(Mutator):
    """Resolve replaced tensors and substitute inlined stages' bodies into loads."""

    def __init__(self, sch: Schedule, inline: dict[Tensor, tuple[ComputeOp, int]],
                 memo: dict[Tensor, PrimExpr]) -> None:
        self.sch, self.inline, self.memo = sch, inline, memo
        self.indices = _LoadIndices(Simplifier())

    @handles(TensorLoad)
    def visit_TensorLoad(self, node: TensorLoad) -> PrimExpr:
        idx = tuple(self.visit(i) for i in node.indices)
        t = self.sch.resolve(node.tensor)
        hit = self.inline.get(t)
        if hit is None:
            return node if t is node.tensor and all(
                a is b for a, b in zip(idx, node.indices)) else TensorLoad(t, idx)
        op, k = hit
        body = self.memo.get(t)
        if body is None:
            body = self.visit(op.body[k])
            self.memo[t] = body
        # NOTE: the substituted indices are simplified while they are in the consumer's own
        # axes: a view's round trip ``(p // w) * w + p % w`` folds to ``p`` here, where after
        # a split of ``p`` bound inference would see whole rows for a block of pixels
        return self.indices.visit(substitute(body, {a.var: i for a, i in zip(op.axis, idx)}))


class _LoadIndices(Mutator):
    """Simplify the indices of the tensor loads in an expression."""

    def __init__(self, simp: Simplifier) -> None:
        self.simp = simp

    @handles(TensorLoad)
    def visit_TensorLoad(self, node: TensorLoad) -> PrimExpr:
        idx = tuple(self.simp.visit(self.visit(i)) for i in node.indices)
        if all(a is b for a, b in zip(idx, node.indices)):
            return node
        return TensorLoad(node.tensor, idx)


def infer_bound(sch: Schedule) -> BoundResult:
    """Run bound inference on a schedule.

    Returns
    -------
    BoundResult
        ``infos`` for every computed stage (regions, extents, loop variables, root values).
    """
    inline: dict[Tensor, tuple[ComputeOp, int]] = {}
    for st in sch.stages:
        if st.attach_type == "inline" and isinstance(st.op, ComputeOp):
            for k in range(st.op.num_outputs):
                inline[st.op.output(k)] = (st.op, k)
    inliner = _Inliner(sch, inline, {})
    order: list[StageBound] = []
    infos: dict[Stage, StageBound] = {}
    for st in sch.stages:
        if st.is_placeholder or st.attach_type == "inline":
            continue
        assert isinstance(st.op, ComputeOp)
        body = tuple(inliner.visit(b) for b in st.op.body)
        info = StageBound(st, st.op, body, list(st.leaf_iter_vars))
        infos[st] = info
        order.append(info)
    readers: dict[Tensor, list[StageBound]] = {}
    reads: dict[tuple[int, Tensor], list[TensorLoad]] = {}
    for info in order:
        for b in info.body:
            for n in post_order(b):
                if isinstance(n, TensorLoad):
                    lst = readers.setdefault(n.tensor, [])
                    if info not in lst:
                        lst.append(info)
                    reads.setdefault((id(info), n.tensor), []).append(n)
    var_ranges: dict[Var, tuple[int, int]] = {}
    names = _ThreadNames()
    for info in reversed(order):
        _bound_stage(info, infos, readers, reads, var_ranges, names)
    return BoundResult(infos, order, var_ranges, inline)


class _ThreadNames:
    """Loop variables for thread-bound axes: the thread axis' own variable, renamed when
    another thread variable already has that name (three ``vthread`` axes print as
    ``vthread``, ``vthread_1``, ``vthread_2``), and a fresh one when the same thread axis is
    bound again inside its own loop (a cooperative fetch under ``threadIdx.x``)."""

    def __init__(self) -> None:
        self.canon: dict[Var, Var] = {}
        self.taken: set[str] = set()

    def _fresh(self, name: str, dtype: str) -> Var:
        k, n = 0, name
        while n in self.taken:
            k += 1
            n = f"{name}_{k}"
        self.taken.add(n)
        return Var(n, dtype)

    def var_for(self, tv: Var, enclosing: set[Var]) -> Var:
        v = self.canon.get(tv)
        if v is None:
            v = tv if tv.name not in self.taken else self._fresh(tv.name, tv.dtype)
            self.taken.add(v.name)
            self.canon[tv] = v
        if v in enclosing:
            v = self._fresh(tv.name, tv.dtype)
        return v


def _bound_stage(info: StageBound, infos: dict[Stage, StageBound],
                 readers: dict[Tensor, list[StageBound]],
                 reads: dict[tuple[int, Tensor], list[TensorLoad]],
                 var_ranges: dict[Var, tuple[int, int]], names: _ThreadNames) -> None:
    st, op = info.stage, info.op
    # 1. attach path
    if st.attach_type == "scope":
        parent = infos.get(st.attach_stage)  # type: ignore[arg-type]
        if parent is None:
            raise LoweringError(f"stage {op.name}: compute_at target "
                                f"{st.attach_stage.op.name} is not computed (inlined?)")  # type: ignore[union-attr]
        pos = next((i for i, lv in enumerate(parent.leaves) if lv is st.attach_ivar), None)
        if pos is None:
            raise LoweringError(f"stage {op.name}: compute_at axis "
                                f"{st.attach_ivar.var.name} is no longer a leaf axis of "  # type: ignore[union-attr]
                                f"{parent.op.name} (split or fused after compute_at)")
        info.path = parent.path + [(parent, lv) for lv in parent.leaves[:pos + 1]]
    info.scope = st.scope or _infer_scope(info.path)
    # 2. region of the data axes
    own = {a.var for a in op.axis} | {r.var for r in op.reduce_axis}
    for r in op.reduce_axis:
        dom = r.dom
        assert dom is not None  # a reduction axis has a domain
        mn = const_int(dom.min)
        info.root_min[r] = const(mn) if mn is not None else _symbolic(dom.min, op, r, own)
        info.ext[r] = _extent(dom.extent, op, r, own)
    for a in op.axis:
        assert a.dom is not None  # a compute axis has a domain
        info.root_min[a] = const(0)
        info.ext[a] = _extent(a.dom.extent, op, a, own)
    if st.attach_type == "scope":
        _region_from_consumers(info, readers, reads, var_ranges)
    # 3. leaf extents and loop variables
    _pass_down_tight(st, info.ext)
    bound_vars = {v for s2, lv in info.path if isinstance(v := s2.loop_var.get(lv), Var)}
    for lv in info.leaves:
        ext = info.ext.get(lv)
        if ext is None:
            raise LoweringError(f"stage {op.name}: cannot infer the extent of axis "
                                f"{lv.var.name}")
        tiv = info.thread_of(lv)
        attr = st.iter_var_attrs.get(lv)
        if type(ext) is not int:
            info.ext[lv] = ext = _SIMP.visit(ext)
            if type(ext) is IntImm:
                info.ext[lv] = ext = ext.value
        if type(ext) is not int:
            _symbolic_leaf(info, lv, tiv, var_ranges, names, bound_vars)
            continue
        if ext < 1:
            raise LoweringError(f"stage {op.name}: axis {lv.var.name} has extent {ext}")
        if tiv is not None:
            v = names.var_for(tiv.var, bound_vars)
            bound_vars.add(v)
            info.loop_var[lv] = v
            launch = ext
            dom_ext = None if tiv.dom is None else const_int(tiv.dom.extent)
            if dom_ext is not None and dom_ext != ext:
                if dom_ext < ext:
                    raise LoweringError(f"stage {op.name}, axis {lv.var.name}: bound to "
                                        f"{tiv.thread_tag} of extent {dom_ext} but the axis "
                                        f"needs {ext}")
                launch = info.launch_ext[lv] = dom_ext
            old = var_ranges.get(v)
            var_ranges[v] = (0, max(launch - 1, old[1] if old else 0))  # type: ignore[type-var]
        elif ext == 1 and not (attr and attr.pragmas):
            info.loop_var[lv] = const(0)
        else:
            info.loop_var[lv] = lv.var
            var_ranges[lv.var] = (0, ext - 1)
    # 4. root values
    info.composed = _pass_up(st.relations, dict(info.loop_var), info.ext)
    simp = Simplifier(var_ranges)
    for r in info.roots:
        info.composed[r] = simp.visit(info.composed[r])
        rmin = info.root_min[r]
        info.root_val[r] = info.composed[r] if const_int(rmin) == 0 else simp.visit(
            rmin + info.composed[r])


def _pass_down_tight(st: Stage, ext: dict[IterVar, Any]) -> None:
    """Leaf extents from root extents (:func:`_pass_down`), with TVM's tightening: the factor
    part of a split shrinks to its parent's extent when the parent needs fewer points, unless a
    leaf below that part is bound to a thread (the launch fixes its extent). A stage attached
    inside a tile then loops over the tile, not over the full factor behind a guard."""
    children: dict[IterVar, list[IterVar]] = {}
    for rel in st.relations:
        if isinstance(rel, Split):
            children.setdefault(rel.parent, []).extend((rel.outer, rel.inner))
        elif isinstance(rel, Fuse):
            for par in (rel.outer, rel.inner):
                children.setdefault(par, []).append(rel.fused)
        else:
            children.setdefault(rel.parent, []).append(rel.rebased)
    memo: dict[IterVar, bool] = {}

    def thread_below(iv: IterVar) -> bool:
        hit = memo.get(iv)
        if hit is None:
            attr = st.iter_var_attrs.get(iv)
            hit = memo[iv] = (attr is not None and attr.bind_thread is not None) or any(
                thread_below(c) for c in children.get(iv, ()))
        return hit

    for rel in st.relations:
        _pass_down([rel], ext)
        if not isinstance(rel, Split):
            continue
        pe = ext[rel.parent]
        part = rel.inner if rel.factor is not None else rel.outer
        if type(pe) is int and type(ext[part]) is int and 0 < pe < ext[part] and \
                not thread_below(part):
            ext[part] = pe


def _symbolic(e: PrimExpr, op: ComputeOp, iv: IterVar, own: set[Var]) -> PrimExpr:
    if collect_vars(e) & own:
        raise LoweringError(f"stage {op.name}: the domain of axis {iv.var.name} ({e}) depends on "
                            f"the stage's own axes")
    return e


def _extent(e: PrimExpr, op: ComputeOp, iv: IterVar, own: set[Var]) -> int | PrimExpr:
    """A root extent: an int, or an expression of shape variables (a symbolic shape)."""
    ex = const_int(e)
    if ex is not None:
        return ex
    return _symbolic(_SIMP.visit(e), op, iv, own)


def _symbolic_leaf(info: StageBound, lv: IterVar, tiv: IterVar | None,
                   var_ranges: dict[Var, Any], names: _ThreadNames, bound_vars: set[Var]) -> None:
    """Loop variable of a leaf whose extent is symbolic: its range has no constant upper end."""
    if tiv is None:
        info.loop_var[lv] = lv.var
        var_ranges[lv.var] = (0, INF)
        return
    if tiv.dom is not None and const_int(tiv.dom.extent) is not None:
        raise LoweringError(f"stage {info.op.name}, axis {lv.var.name}: a symbolic extent "
                            f"{info.ext[lv]} cannot be bound to {tiv.thread_tag} of fixed "
                            f"extent {tiv.dom.extent}")
    v = names.var_for(tiv.var, bound_vars)
    bound_vars.add(v)
    info.loop_var[lv] = v
    var_ranges[v] = (0, INF)
