"""Schedule -> loop nest with flattened buffer accesses (TVM's ScheduleOps + StorageFlatten).

Each computed stage becomes a nest of its leaf loops; stages attached with ``compute_at`` are
emitted (with their ``Allocate``) inside the attach loop, before the rest of the consumer's nest.
A reduction's initialisation goes right before its first reduction loop, over the data-parallel
loops below that point. Root indices are rebuilt from leaf loop variables (``outer*f + inner``,
``fused // e``, ``fused % e``) and simplified; points that a non-dividing split adds are skipped
with ``if (likely(cond))`` placed right below the innermost loop the condition uses. The buffer
layout and index flattening are in :mod:`templtune.lower.storage`.
"""

from __future__ import annotations

from templtune.errors import LoweringError
from templtune.lower.double_buffer import mark_double_buffer
from templtune.lower.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    Stmt,
    Store,
    seq,
)
from templtune.lower.prefetch import PREFETCH
from templtune.lower.storage import (  # noqa: F401  (re-exported: were defined here)
    StorageLayout,
    _add,
    _ext_expr,
    _mul_const,
    _row_major,
    _row_major_sym,
    _Storage,
    _sub,
)
from templtune.schedule.bound import BoundResult, StageBound
from templtune.schedule.relations import Split
from templtune.schedule.schedule import Schedule
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    IterKind,
    IterVar,
    PrimExpr,
    Reduce,
    TensorLoad,
    Var,
    const,
    const_int,
)
from templtune.te.functor import Mutator, collect_vars, handles, substitute
from templtune.te.simplify import Simplifier, const_bound
from templtune.te.tensor import Tensor

_KIND = {IterKind.VECTORIZED: ForKind.VECTORIZED, IterKind.UNROLLED: ForKind.UNROLLED,
         IterKind.PARALLELIZED: ForKind.PARALLEL}


def _one(e: int | PrimExpr) -> bool:
    return type(e) is int and e == 1


def _and_all(conds: list[PrimExpr]) -> PrimExpr:
    c = conds[0]
    for x in conds[1:]:
        c = BinOp(BinOpKind.AND, c, x, "bool")
    return c


class _ToIR(Mutator):
    def __init__(self, nb: NestBuilder, vmap: dict[Var, PrimExpr]) -> None:
        self.nb, self.vmap = nb, vmap

    @handles(Var)
    def visit_Var(self, node: Var) -> PrimExpr:
        return self.vmap.get(node, node)

    @handles(TensorLoad)
    def visit_TensorLoad(self, node: TensorLoad) -> PrimExpr:
        idx = [self.visit(i) for i in node.indices]
        st = self.nb.storage(node.tensor)
        return Load(st.buffer, self.nb.flat(st, idx))

    @handles(Reduce)
    def visit_Reduce(self, node: Reduce) -> PrimExpr:
        raise LoweringError("a reduction may only be the whole body of a compute")


class NestBuilder(StorageLayout):
    """Builds the loop nest of a whole schedule (see module docstring)."""

    def __init__(self, sch: Schedule, args: list[Tensor], br: BoundResult,
                 names: list[str] | None = None) -> None:
        self.sch, self.br = sch, br
        self._init_storage(Simplifier(br.var_ranges), args, names)
        self._attached: dict[tuple[int, IterVar], list[StageBound]] = {}
        for info in br.order:
            st = info.stage
            if st.attach_type == "scope":
                parent = br.infos[st.attach_stage]  # type: ignore[index]
                self._attached.setdefault((id(parent), st.attach_ivar), []).append(info)  # type: ignore[arg-type]
        for info in br.order:
            self._declare(info)

    # ---------------------------------------------------------------------------- nests

    def build(self) -> Stmt:
        roots = [i for i in self.br.order if i.stage.attach_type == "root"]
        body = seq(*[self.stage_stmt(i) for i in roots])
        for info in reversed(roots):
            for buf in reversed(self.allocations(info)):
                body = Allocate(buf, body)
        return body

    def _guards(self, info: StageBound) -> list[PrimExpr]:
        """Conditions skipping the points that uneven splits add (TVM's MakeBoundCheck)."""
        conds: list[PrimExpr] = []
        rng = self.br.var_ranges
        for lv in info.launch_ext:
            conds.append(info.loop_var[lv] < info.ext[lv])
        # NOTE: leaves are in range by construction, and a fused axis in range keeps both
        # of its parts in range; so only a split whose parts overshoot its parent can take a
        # variable out of range, and guarding that parent restores the invariant upwards.
        for rel in info.stage.relations:
            if not isinstance(rel, Split):
                continue
            ext = info.ext[rel.parent]
            eo, ei = info.ext[rel.outer], info.ext[rel.inner]
            comp = info.composed[rel.parent]
            if type(ext) is not int or type(eo) is not int or type(ei) is not int:
                # NOTE: a split of a symbolic extent overshoots it unless one part is 1
                if not ((_one(ei) and eo is ext) or (_one(eo) and ei is ext)):
                    conds.append(self.simp.visit(comp < _ext_expr(ext)))
                continue
            if eo * ei <= ext:
                continue
            if self.simp.bound(comp)[1] >= ext:
                conds.append(self.simp.visit(comp < ext))
        for a in info.op.axis:
            mn = info.root_min[a]
            assert a.dom is not None  # a compute axis has a domain
            full = const_int(a.dom.extent)
            if full is None:
                # NOTE: a region computed for consumers may pass a symbolic end of the tensor
                if type(info.ext[a]) is int or const_int(mn) != 0:
                    v = info.root_val[a]
                    if const_bound(v, rng)[0] < 0:
                        conds.append(self.simp.visit(v >= 0))
                    conds.append(self.simp.visit(v < a.dom.extent))
                continue
            if const_int(mn) == 0:
                continue
            lo_m, hi_m = const_bound(mn, rng)
            if lo_m >= 0 and hi_m + info.ext[a] <= full:
                continue  # the region lies inside the tensor
            v = info.root_val[a]
            lo, hi = const_bound(v, rng)
            if lo < 0:
                conds.append(self.simp.visit(v >= 0))
            if hi >= full:
                conds.append(self.simp.visit(v < full))
        seen: set[str] = set()
        out = []
        for c in conds:
            key = str(c)
            if const_int(c) != 1 and key not in seen:
                seen.add(key)
                out.append(c)
        return out

    def _level(self, cond: PrimExpr, pos_of: dict[Var, int]) -> int:
        return max((pos_of.get(v, -1) for v in collect_vars(cond)), default=-1)

    def stage_stmt(self, info: StageBound) -> Stmt:
        op = info.op
        leaves = info.leaves
        n = len(leaves)
        pos_of = {v: i for i, lv in enumerate(leaves) if isinstance(v := info.loop_var[lv], Var)}
        vmap = {r.var: info.root_val[r] for r in info.roots}
        conv = _ToIR(self, vmap)
        out_idx = [info.root_val[a] for a in op.axis]
        # NOTE: a guard never wraps stages attached inside this nest: their loops may be bound
        # to threads that must all take part (cooperative fetches), and they carry their own
        # guards. So a guard sinks below the deepest attach point.
        floor = max((p for p, lv in enumerate(leaves) if (id(info), lv) in self._attached),
                    default=-1)
        raw = [(c, self._level(c, pos_of)) for c in self._guards(info)]
        conds = [(c, max(lv, floor)) for c, lv in raw]
        init: Stmt | None = None
        if isinstance(info.body[0], Reduce):
            reds: list[Reduce] = list(info.body)  # type: ignore[arg-type]
            red = reds[0]
            comb = red.combiner
            if len(red.source) != op.num_outputs or len(comb.result) != op.num_outputs:
                raise LoweringError(f"stage {op.name}: a reduction with {len(red.source)} values "
                                    f"must have as many outputs (has {op.num_outputs})")
            sts = [self.storage(op.output(k)) for k in range(op.num_outputs)]
            idxs = [self.flat(st, out_idx) for st in sts]
            vmap_red: dict[Var, PrimExpr] = {}
            for k, st in enumerate(sts):
                vmap_red[comb.lhs[k]] = Load(st.buffer, idxs[k])
                vmap_red[comb.rhs[k]] = conv.visit(red.source[k])
            if op.num_outputs == 1:
                main: Stmt = Store(sts[0].buffer, idxs[0], substitute(comb.result[0], vmap_red))
            else:
                # NOTE: all new values are computed before any is stored (argmax reads both)
                tmps = [Var(f"{op.name}.red{k}", op.output(k).dtype)
                        for k in range(op.num_outputs)]
                main = seq(*[Store(st.buffer, i, t) for st, i, t in zip(sts, idxs, tmps)])
                for k in range(op.num_outputs - 1, -1, -1):
                    main = LetStmt(tmps[k], substitute(comb.result[k], vmap_red), main)
            if const_int(red.condition) != 1:
                main = IfThenElse(conv.visit(red.condition), main)
            first = next((i for i, lv in enumerate(leaves)
                          if lv.iter_type is IterKind.REDUCE), n)
            idents = red.init if red.init else comb.identity
            init = self._init_nest(info, first,
                                   [(st, conv.visit(v)) for st, v in zip(sts, idents)], out_idx,
                                   [(c, lv if lv >= first else -1)
                                    for (c, lv), (_, adj) in zip(raw, conds) if adj >= first],
                                   pos_of)
        else:
            first = -2
            main = seq(*[Store(self.storage(op.output(k)).buffer,
                               self.flat(self.storage(op.output(k)), out_idx),
                               conv.visit(info.body[k])) for k in range(op.num_outputs)])
        body: Stmt = main
        for p in range(n - 1, -1, -1):
            rest = body
            if p == first - 1 and init is not None:
                rest = seq(init, rest)
            here = [c for c, lv in conds if lv == p]
            if here:
                rest = IfThenElse(_likely(_and_all(here)), rest)
            rest = self._with_attached(info, leaves[p], rest)
            body = self._loop(info, leaves[p], info.loop_var[leaves[p]], rest)
        if first == 0 and init is not None:
            body = seq(init, body)
        top = [c for c, lv in conds if lv == -1]
        if top:
            body = IfThenElse(_likely(_and_all(top)), body)
        return body

    def _init_nest(self, info: StageBound, first: int, inits: list[tuple[_Storage, PrimExpr]],
                   out_idx: list[PrimExpr], conds: list[tuple[PrimExpr, int]],
                   pos_of: dict[Var, int]) -> Stmt:
        leaves = [(p, lv) for p, lv in enumerate(info.leaves)
                  if p >= first and lv.iter_type is not IterKind.REDUCE]
        sub: dict[Var, PrimExpr] = {}
        for _, lv in leaves:
            v = info.loop_var[lv]
            if isinstance(v, Var):
                nv = Var(f"{v.name}.init", v.dtype)
                sub[v] = nv
                self.simp.ranges[nv] = self.br.var_ranges[v]
        idx = [substitute(i, sub) for i in out_idx]
        body: Stmt = seq(*[Store(st.buffer, self.flat(st, idx), value) for st, value in inits])
        red_vars = {v for v, p in pos_of.items() if info.leaves[p].iter_type is IterKind.REDUCE}
        # NOTE: a guard on a reduction loop (k < K) does not apply to the initialisation
        conds = [(c, lvl) for c, lvl in conds if not (collect_vars(c) & red_vars)]
        for p, lv in reversed(leaves):
            here = [substitute(c, sub) for c, lvl in conds if lvl == p]
            if here:
                body = IfThenElse(_likely(_and_all(here)), body)
            v = info.loop_var[lv]
            body = self._loop(info, lv, sub.get(v, v) if isinstance(v, Var) else v, body)
        top = [c for c, lvl in conds if lvl == -1]
        if top:
            body = IfThenElse(_likely(_and_all(top)), body)
        return body

    def _with_attached(self, info: StageBound, lv: IterVar, rest: Stmt) -> Stmt:
        kids = self._attached.get((id(info), lv))
        if not kids:
            return rest
        body = seq(*[self._attached_stmt(k) for k in kids], rest)
        for k in reversed(kids):
            for buf in reversed(self.allocations(k)):
                body = Allocate(buf, body)
        return body

    def _attached_stmt(self, info: StageBound) -> Stmt:
        body, st = self.stage_stmt(info), info.stage
        if not st.double_buffered:
            return body
        parent = self.br.infos[st.attach_stage]  # type: ignore[index]
        unit = not isinstance(parent.loop_var[st.attach_ivar], Var)  # type: ignore[index]
        return mark_double_buffer(info.op, self._storage[info.op.output(0)].buffer, body, unit)

    def _loop(self, info: StageBound, lv: IterVar, var: PrimExpr, body: Stmt) -> Stmt:
        ext = info.launch_ext.get(lv, info.ext[lv])
        attr = info.stage.iter_var_attrs.get(lv)
        tiv = attr.bind_thread if attr else None
        ann = tuple((f"pragma_{k}", v) for k, v in attr.pragmas) if attr else ()
        if attr and attr.prefetch:
            ann += tuple((PREFETCH, (self._prefetched(info, t), k)) for t, k in attr.prefetch)
        if tiv is not None:
            assert isinstance(var, Var)
            return For(var, const(0), _ext_expr(ext), ForKind.THREAD_BINDING, body,
                       thread_tag=tiv.thread_tag, annotations=ann)
        if not isinstance(var, Var):
            return body  # unit loop removed
        kind = _KIND.get(attr.kind, ForKind.SERIAL) if attr and attr.kind else ForKind.SERIAL
        return For(var, const(0), _ext_expr(ext), kind, body, annotations=ann)

    def _prefetched(self, info: StageBound, tensor: Tensor) -> Buffer:
        t = self.sch.resolve(tensor)
        if t not in self._storage:
            raise LoweringError(f"stage {info.op.name}: prefetch of {tensor.name}, which the "
                                "lowered function does not read")
        return self._storage[t].buffer


def _likely(c: PrimExpr) -> PrimExpr:
    return Call("bool", "likely", (c,))


def build_nest(sch: Schedule, args: list[Tensor], br: BoundResult,
               names: list[str] | None = None) -> tuple[list[Buffer], Stmt]:
    """Loop nest of ``sch``; returns the parameter buffers (in ``args`` order, named
    ``names``) and the body."""
    nb = NestBuilder(sch, args, br, names)
    return nb.params, nb.build()


__all__ = ["build_nest", "NestBuilder"]
