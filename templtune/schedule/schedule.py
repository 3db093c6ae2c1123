"""Schedule: the stages of a computation graph and the data-flow rewriting primitives
(``cache_read``, ``cache_write``, ``rfactor``).

Operations are immutable, so a rewrite creates new operations. The schedule keeps a map from
every superseded tensor to its replacement (:meth:`Schedule.resolve`); bodies are rewritten
through it when lowering, so a user may keep using the tensors created before a rewrite
(``s[C]`` and ``args=[A, B, C]`` still work after ``cache_write(C, "local")``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from templtune.errors import ScheduleError
from templtune.schedule.message_passing import (  # noqa: F401  (re-exported: were defined here)
    _ceil_div,
    _children,
    _is_one,
    _may_exceed,
    _mul,
    _pass_down,
    _pass_up,
)
from templtune.schedule.relations import Fuse, Split, new_iter_var
from templtune.schedule.stage import Stage, _ivname
from templtune.te.expr import (
    Call,
    IterKind,
    IterVar,
    PrimExpr,
    Range,
    Reduce,
    TensorLoad,
    Var,
    const,
    const_int,
)
from templtune.te.functor import Mutator, handles, substitute
from templtune.te.tensor import ComputeOp, Operation, Tensor


class _LoadRewriter(Mutator):
    def __init__(self, tmap: dict[Tensor, Tensor]) -> None:
        self.tmap = tmap

    @handles(TensorLoad)
    def visit_TensorLoad(self, node: TensorLoad) -> PrimExpr:
        idx = tuple(self.visit(i) for i in node.indices)
        t = self.tmap.get(node.tensor, node.tensor)
        if t is node.tensor and all(a is b for a, b in zip(idx, node.indices)):
            return node
        return TensorLoad(t, idx)


def rewrite_loads(body: Sequence[PrimExpr], tmap: dict[Tensor, Tensor]) -> tuple[PrimExpr, ...]:
    """``body`` with every load of a key tensor of ``tmap`` redirected to its value."""
    rw = _LoadRewriter(tmap)
    return tuple(rw.visit(b) for b in body)


def _as_ops(x: Any) -> list[Operation]:
    items = x if isinstance(x, (list, tuple)) else [x]
    out = []
    for it in items:
        if isinstance(it, Tensor):
            out.append(it.op)
        elif isinstance(it, Operation):
            out.append(it)
        else:
            raise ScheduleError(f"expected a tensor or an operation, got {type(it).__name__}")
    return out


class Schedule:
    """Stages of all operations reachable from the outputs, producers first."""

    def __init__(self, outputs: Sequence[Operation]) -> None:
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        self._tmap: dict[Tensor, Tensor] = {}
        self._output_stages: list[Stage] = []
        seen: set[int] = set()

        def visit(op: Operation) -> None:
            stack: list[tuple[Operation, bool]] = [(op, False)]
            while stack:
                o, done = stack.pop()
                if done:
                    if id(o) not in self.stage_map_ids:
                        st = Stage(o, self)
                        self.stages.append(st)
                        self.stage_map[o] = st
                        self.stage_map_ids.add(id(o))
                    continue
                if id(o) in seen:
                    continue
                seen.add(id(o))
                stack.append((o, True))
                for t in reversed(o.input_tensors):
                    if id(t.op) not in seen:
                        stack.append((t.op, False))

        self.stage_map_ids: set[int] = set()
        for op in outputs:
            visit(op)
        for op in outputs:
            st = self.stage_map[op]
            st.is_output = True
            if st not in self._output_stages:
                self._output_stages.append(st)

    # ------------------------------------------------------------------------------ lookup

    def __getitem__(self, x: Tensor | Operation) -> Stage:
        op = x.op if isinstance(x, Tensor) else x
        st = self.stage_map.get(op)
        if st is None:
            name = getattr(op, "name", repr(op))
            raise ScheduleError(f"{name} is not part of this schedule")
        return st

    def create_group(self, outputs: Any, inputs: Any, include_inputs: bool = False) -> Any:
        """Group the stages between ``inputs`` and ``outputs`` (tensors or lists of them): the
        outputs are members, the inputs are members only with ``include_inputs``. Returns a
        :class:`~templtune.schedule.group.StageGroup` (``compute_at`` moves it as one)."""
        from templtune.schedule.group import StageGroup

        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        stop = {id(self[t]) for t in ins}
        member_ids: set[int] = set()
        stack = [self[t] for t in outs]
        while stack:
            st = stack.pop()
            if id(st) in member_ids:
                continue
            if id(st) in stop:
                if include_inputs:
                    member_ids.add(id(st))
                continue
            if st.is_placeholder:  # a placeholder has no loops to group
                continue
            member_ids.add(id(st))
            stack.extend(self.stage_inputs(st))
        members = [st for st in self.stages if id(st) in member_ids]
        return StageGroup(members)

    def normalize(self) -> Schedule:
        """TVM's ``Schedule.normalize`` (rebase every loop to start at 0). Lowering in templtune
        always emits loops from 0 and offsets the index (a ``reduce_axis((2, 6))`` lowers to
        ``for (k, 0, 4)`` reading ``k + 2``), so every schedule is already normal: this
        returns the schedule itself."""
        return self

    @property
    def outputs(self) -> list[Operation]:
        return [st.op for st in self._output_stages]

    def resolve(self, t: Tensor) -> Tensor:
        """The current tensor standing for ``t`` (after cache_write / rfactor rewrites)."""
        seen = 0
        while t in self._tmap:
            t = self._tmap[t]
            seen += 1
            if seen > 10000:  # pragma: no cover - a cycle would be a bug
                raise ScheduleError("cycle in the schedule's tensor replacement map")
        return t

    def stage_inputs(self, st: Stage) -> list[Stage]:
        """Stages whose outputs ``st`` reads (after resolving replaced tensors)."""
        out: list[Stage] = []
        for t in st.op.input_tensors:
            p = self[self.resolve(t)]
            if p not in out:
                out.append(p)
        return out

    def _is_consumer(self, consumer: Stage, producer: Stage) -> bool:
        """True when ``consumer`` reads ``producer`` directly or transitively."""
        stack, seen = [consumer], set()
        while stack:
            st = stack.pop()
            for p in self.stage_inputs(st):
                if p is producer:
                    return True
                if id(p) not in seen:
                    seen.add(id(p))
                    stack.append(p)
        return False

    def _readers(self, t: Tensor) -> list[Stage]:
        return [st for st in self.stages
                if any(self.resolve(x) is t for x in st.op.input_tensors)]

    def _replace_op(self, st: Stage, new_op: Operation) -> None:
        for i in range(st.op.num_outputs):
            self._tmap[st.op.output(i)] = new_op.output(i)
        st.op = new_op
        self.stage_map[new_op] = st

    def _insert(self, st: Stage, index: int) -> None:
        self.stages.insert(index, st)
        self.stage_map[st.op] = st

    # ----------------------------------------------------------------------- rewrites

    def cache_read(self, tensor: Tensor, scope: str, readers: Any) -> Tensor:
        """A stage copying ``tensor`` into ``scope`` (named ``<tensor>.<scope>``); the given
        readers read the copy instead."""
        tensor = self.resolve(tensor)
        src = self[tensor]
        reader_stages = [self[o] for o in _as_ops(readers)]
        for r in reader_stages:
            if not any(self.resolve(t) is tensor for t in r.op.input_tensors):
                raise ScheduleError(f"stage {r.op.name}: cache_read reader does not read "
                                    f"{tensor.name}")
        # NOTE: a symbolic dimension keeps its expression as the copy's extent
        axes = tuple(new_iter_var(f"ax{i}", c, IterKind.DATA_PAR) if (c := const_int(d)) is not None
                     else IterVar(Range(const(0, d.dtype), d), Var(f"ax{i}", d.dtype),
                                  IterKind.DATA_PAR)
                     for i, d in enumerate(tensor.shape))
        body = TensorLoad(tensor, tuple(a.var for a in axes))
        cache_op = ComputeOp(f"{tensor.name}.{scope}", "", (), axes, (), (body,))
        cache = cache_op.output(0)
        for r in reader_stages:
            tm = {t: cache for t in r.op.input_tensors if self.resolve(t) is tensor}
            assert isinstance(r.op, ComputeOp)  # readers of a tensor are computes
            new_op = dataclasses.replace(r.op, body=rewrite_loads(r.op.body, tm))
            self._replace_op(r, new_op)
        st = Stage(cache_op, self)
        st.scope = scope
        self._insert(st, self.stages.index(src) + 1)
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a ``<tensor>.<scope>`` stage; the original stage copies it
        out. Must come before split/fuse/reorder on that stage (as in TVM)."""
        tensor = self.resolve(tensor)
        st = self[tensor]
        op = st.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"stage {op.name}: cannot cache_write a placeholder")
        if op.num_outputs != 1:
            raise ScheduleError(f"stage {op.name}: cache_write of multi-output ops is not "
                                f"supported")
        if st.relations:
            raise ScheduleError(f"stage {op.name}: cache_write must come before split/fuse on "
                                f"the stage (it already has {len(st.relations)} relation(s))")
        new_axes = tuple(IterVar(a.dom, Var(f"{a.var.name}.c", a.var.dtype), a.iter_type)
                         for a in op.axis)
        vmap = {a.var: n.var for a, n in zip(op.axis, new_axes)}
        cache_body = tuple(substitute(b, vmap) for b in op.body)
        cache_op = ComputeOp(f"{op.name}.{scope}", op.tag, op.attrs, new_axes, op.reduce_axis,
                             cache_body)
        cache = cache_op.output(0)
        copy_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, (),
                            (TensorLoad(cache, tuple(a.var for a in op.axis)),))
        self._replace_op(st, copy_op)
        st.all_iter_vars = list(op.axis)
        st.leaf_iter_vars = list(op.axis)
        for r in op.reduce_axis:
            st.iter_var_attrs.pop(r, None)
        cst = Stage(cache_op, self)
        cst.scope = scope
        self._insert(cst, self.stages.index(st))
        return cache

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
        """Factor the reduction of ``tensor`` over leaf ``axis`` into a new ``<name>.rf`` stage
        with ``axis`` as a data axis (at position ``factor_axis``); the original stage then
        reduces the partial results. Returns the rf tensor.

        Where a split does not divide the reduction, the rf stage's reduction runs under its
        bound check as a ``likely(...)`` guard (TVM's is a plain condition), so that lowering
        peels the partial last iteration like any other split's."""
        tensor = self.resolve(tensor)
        st = self[tensor]
        op = st.op
        if not isinstance(op, ComputeOp) or not op.reduce_axis:
            raise ScheduleError(f"stage {op.name}: rfactor needs a reduction stage")
        if op.num_outputs != 1 or not isinstance(op.body[0], Reduce):
            raise ScheduleError(f"stage {op.name}: rfactor supports single-output reductions")
        red: Reduce = op.body[0]  # type: ignore[assignment]
        pos = st._leaf_pos(axis, "rfactor")
        if axis.iter_type is not IterKind.REDUCE:
            raise ScheduleError(f"stage {op.name}, axis {_ivname(axis)}: rfactor needs a "
                                f"reduction axis")
        if not 0 <= factor_axis <= len(op.axis):
            raise ScheduleError(f"stage {op.name}: factor_axis {factor_axis} out of range")
        # reduce-side relations and leaves; their extents must be constant
        red_set: set[IterVar] = set(op.reduce_axis)
        red_rels = []
        for rel in st.relations:
            parents = (rel.parent,) if isinstance(rel, Split) else (
                (rel.outer, rel.inner) if isinstance(rel, Fuse) else (rel.parent,))
            if any(p in red_set for p in parents):
                red_rels.append(rel)
                red_set.update(_children(rel))
        red_leaves = [lv for lv in st.leaf_iter_vars if lv in red_set]
        ext: dict[IterVar, int] = {}
        for r in op.reduce_axis:
            e = const_int(r.dom.extent) if r.dom is not None else None
            if e is None or const_int(r.dom.min) != 0:  # type: ignore[union-attr]
                raise ScheduleError(f"stage {op.name}: rfactor needs constant reduction "
                                    f"domains starting at 0 (axis {_ivname(r)})")
            ext[r] = e
        _pass_down(red_rels, ext)
        # new iteration variables of the rf stage
        rf_axis = new_iter_var(axis.var.name, ext[axis], IterKind.DATA_PAR)
        data_axes = tuple(IterVar(a.dom, Var(a.var.name, a.var.dtype), a.iter_type)
                          for a in op.axis)
        new_red = {lv: new_iter_var(lv.var.name, ext[lv], IterKind.REDUCE)
                   for lv in red_leaves if lv is not axis}
        leaf_val: dict[IterVar, PrimExpr] = {axis: rf_axis.var}
        leaf_val.update({lv: iv.var for lv, iv in new_red.items()})
        root_val = _pass_up(red_rels, leaf_val, ext)
        vmap: dict[Var, PrimExpr] = {a.var: n.var for a, n in zip(op.axis, data_axes)}
        vmap.update({r.var: root_val[r] for r in op.reduce_axis})
        cond = substitute(red.condition, vmap)
        bounds = [root_val[r] < ext[r] for r in op.reduce_axis if _may_exceed(red_rels, r, ext)]
        if bounds:
            # NOTE: a split bound is a likely() guard, as the loop nest's own bound checks
            # are, so that lowering peels the partial last iteration and the rest vectorizes.
            bound = bounds[0]
            for b in bounds[1:]:
                bound = bound & b
            guard = Call("bool", "likely", (bound,))
            cond = guard if const_int(cond) == 1 else cond & guard
        src = tuple(substitute(x, vmap) for x in red.source)
        init = tuple(substitute(x, vmap) for x in red.init)
        rf_body = Reduce(red.combiner, src, tuple(new_red.values()), cond, red.value_index,
                         init)
        axes = data_axes[:factor_axis] + (rf_axis,) + data_axes[factor_axis:]
        rf_op = ComputeOp(f"{op.name}.rf", op.tag, op.attrs, axes, tuple(new_red.values()),
                          (rf_body,))
        rf = rf_op.output(0)
        # the original stage reduces the partial results over a new axis
        rv = new_iter_var(f"{axis.var.name}.v", ext[axis], IterKind.REDUCE)
        idx = [a.var for a in op.axis]
        idx.insert(factor_axis, rv.var)
        repl_body = Reduce(red.combiner, (TensorLoad(rf, tuple(idx)),), (rv,), const(True),
                           red.value_index, ())
        repl_op = ComputeOp(f"{op.name}.repl", op.tag, op.attrs, op.axis, (rv,), (repl_body,))
        self._replace_op(st, repl_op)
        st.relations = [r for r in st.relations if r not in red_rels]
        st.leaf_iter_vars = [lv for lv in st.leaf_iter_vars if lv not in red_set] + [rv]
        st.all_iter_vars = [v for v in st.all_iter_vars if v not in red_set] + [rv]
        for v in red_set:
            st.iter_var_attrs.pop(v, None)
        st.allow_reduce_bind = True
        del pos
        rst = Stage(rf_op, self)
        self._insert(rst, self.stages.index(st))
        return rf


def create_schedule(ops: Any) -> Schedule:
    """Create a schedule for the given output op(s) or tensor(s).

    Parameters
    ----------
    ops : Tensor, Operation or list of them
        The outputs; every operation they depend on gets a stage.
    """
    return Schedule(_as_ops(ops))


__all__ = ["Schedule", "create_schedule", "Range"]
