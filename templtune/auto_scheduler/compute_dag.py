"""ComputeDAG: the operations of a workload, their access analysis and FLOP count, and the
bridge from loop states to te schedules (replay, bound inference, Python code)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from templtune.dtype import is_float
from templtune.te.expr import BinOp, Call, Cast, Not, Reduce, Select
from templtune.te.printer import expr_str
from templtune.te.tensor import ComputeOp, PlaceholderOp, Tensor

from .loop_state import INLINED, State
from .replay import replay_schedule, structure_of

logger = logging.getLogger("auto_scheduler")


def _int(x: Any) -> int:
    return int(getattr(x, "value", x))


def _cls(dtype: str) -> bool:
    return is_float(dtype)


def _expr_flop(e: Any, out_float: bool) -> int:
    if isinstance(e, BinOp):
        own = 1 if (_cls(e.a.dtype) == out_float or _cls(e.b.dtype) == out_float) else 0
        return own + _expr_flop(e.a, out_float) + _expr_flop(e.b, out_float)
    if isinstance(e, Not):
        return _expr_flop(e.a, out_float)
    if isinstance(e, Select):
        return (_expr_flop(e.cond, out_float) + _expr_flop(e.true_value, out_float)
                + _expr_flop(e.false_value, out_float))
    if isinstance(e, Call):
        return sum(_expr_flop(a, out_float) for a in e.args)
    if isinstance(e, Cast):
        return _expr_flop(e.value, out_float)
    return 0


def _op_flop(op: ComputeOp) -> int:
    attrs = dict(op.attrs)
    if "FLOP" in attrs:
        return int(attrs["FLOP"])
    out = 1
    for a in op.axis:
        assert a.dom is not None  # compute axes always have a domain
        out *= _int(a.dom.extent)
    out_float = _cls(op.body[0].dtype)
    body = 0
    for b in op.body[:1]:
        if isinstance(b, Reduce):
            red = 1
            for r in b.axis:
                assert r.dom is not None  # reduce axes always have a domain
                red *= _int(r.dom.extent)
            combine = 1 if _cls(b.dtype) == out_float else 0
            body += red * (sum(_expr_flop(s, out_float) for s in b.source) + combine
                           + _expr_flop(b.condition, out_float))
        else:
            body += _expr_flop(b, out_float)
    return out * body


class ComputeDAG:
    """The computation of a workload.

    Parameters
    ----------
    compute_or_sche : list of Tensor, str or Schedule
        The input and output tensors, a workload key, or a te schedule.
    """

    def __init__(self, compute_or_sche: Any) -> None:
        from templtune.schedule.schedule import Schedule

        from .workload_registry import workload_key_to_tensors

        if isinstance(compute_or_sche, str):
            tensors = workload_key_to_tensors(compute_or_sche)
        elif isinstance(compute_or_sche, Schedule):
            outs = [op.output(0) for op in compute_or_sche.outputs]
            tensors = [st.op.output(0) for st in compute_or_sche.stages
                       if isinstance(st.op, PlaceholderOp)] + outs
        elif isinstance(compute_or_sche, Tensor):
            tensors = [compute_or_sche]
        else:
            tensors = list(compute_or_sche)
        self.tensors: list[Tensor] = tensors
        read: set[int] = set()
        for t in tensors:
            self._mark_reads(t.op, read, set())
        self.outputs = [t for t in tensors
                        if isinstance(t.op, ComputeOp) and id(t.op) not in read]
        if not self.outputs:
            raise ValueError("ComputeDAG needs at least one compute output tensor")
        for t in tensors:
            if isinstance(t.op, ComputeOp):
                self._check_names(t.op)
        # NOTE: per-DAG cache of structural replays (see replay.structure_of); not pickled.
        self._struct_cache: dict[str, Any] = {}
        self._init_struct = structure_of(self, ())
        self.ops = [st.op for st in self._init_struct.sch.stages]
        for op in self.ops:
            if isinstance(op, ComputeOp):
                self._check_names(op)
        self.flop_ct = float(sum(_op_flop(op) for op in self.ops if isinstance(op, ComputeOp)))

    @staticmethod
    def _mark_reads(op: Any, read: set[int], seen: set[int]) -> None:
        stack = [op]
        while stack:
            o = stack.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            for t in o.input_tensors:
                read.add(id(t.op))
                stack.append(t.op)

    @staticmethod
    def _check_names(op: ComputeOp) -> None:
        names = [a.var.name for a in op.axis] + [a.var.name for a in op.reduce_axis]
        if len(set(names)) != len(names):
            raise ValueError(f"invalid compute {op.name}: duplicate iterator names {names}")

    # ---- pickling: the te tensors pickle; the cached structure is rebuilt ----------------------
    def __getstate__(self) -> dict:
        return {"tensors": self.tensors}

    def __setstate__(self, d: dict) -> None:
        self.__init__(d["tensors"])  # type: ignore[misc]

    # ---- states --------------------------------------------------------------------------------
    def get_init_state(self) -> State:
        """The state with one untransformed stage per operation (immutable, so cached)."""
        init = getattr(self, "_init_state", None)
        if init is None:
            st = self._init_struct
            stages = tuple(st.fresh_stage(k, None) for k in range(len(st.sch.stages)))
            init = self._init_state = State(stages, (), (), True, st)
        return init

    @property
    def init_state(self) -> State:
        return self.get_init_state()

    def replay(self, steps: Sequence[Any]) -> State:
        """The state reached by applying ``steps`` to the init state."""
        s = self.get_init_state()
        for step in steps:
            s = step.apply_to_state(s)
        return s

    def apply_steps_from_state(self, state: State, layout_rewrite: Any = None,
                               is_gpu: bool = False) -> tuple[Any, list[Tensor]]:
        """``(schedule, tensors)`` with the state's steps replayed on a te schedule.

        ``layout_rewrite`` (LayoutRewriteOption: 0/None none; 1 a transform stage inside the
        kernel, whose tensors stay the same; 2 the kernel reads each re-laid placeholder as a
        new ``<name>.layout`` tensor, which replaces it among the returned tensors; see
        :mod:`.layout_rewrite`) re-lays the layout-free placeholders the state tiles."""
        return replay_schedule(self, state, is_gpu, int(layout_rewrite or 0))

    def infer_bound_from_state(self, state: State) -> State:
        """The state with every iterator extent filled in by te bound inference."""
        from templtune.schedule.bound import infer_bound

        sch, _ = replay_schedule(self, state)
        res = infer_bound(sch)
        stages = list(state.stages)
        for k, st in enumerate(state.stages):
            if st.op_type == 0 or st.compute_at == INLINED:
                continue
            info = res.infos.get(sch.stages[k])
            if info is None:
                continue
            iters = tuple(dataclasses.replace(it, range=info.ext.get(lv, it.range))
                          for it, lv in zip(st.iters, info.leaves))
            stages[k] = dataclasses.replace(st, iters=iters)
        return dataclasses.replace(state, stages=tuple(stages))

    def print_python_code_from_state(self, state: State) -> str:
        """The state's steps as Python te schedule code."""
        from .python_printer import print_python

        return print_python(self, state)

    # ---- identity ------------------------------------------------------------------------------
    def workload_key(self) -> str:
        """``[md5 of the DAG text, *shapes of the tensors]`` as JSON."""
        h = hashlib.md5(str(self).encode()).hexdigest()
        return json.dumps([h, *[[_int(s) for s in t.shape] for t in self.tensors]])

    def hash_key(self) -> str:
        return hashlib.md5(str(self).encode()).hexdigest()

    def __str__(self) -> str:
        lines = []
        for op in self.ops:
            if isinstance(op, PlaceholderOp):
                lines.append(f"{op.name} = PLACEHOLDER [{', '.join(str(_int(s)) for s in op.shape)}]")
                continue
            assert isinstance(op, ComputeOp)
            idx = ", ".join(a.var.name for a in op.axis)
            b = op.body[0]
            if isinstance(b, Reduce):
                comb = b.combiner.name
                src = ", ".join(expr_str(s) for s in b.source)
                if comb == "sum":
                    lines.append(f"{op.name}({idx}) += {src}")
                else:
                    lines.append(f"{op.name}({idx}) {comb}= {src}")
            else:
                lines.append(f"{op.name}({idx}) = {expr_str(b)}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"ComputeDAG({[t.name for t in self.tensors]})"
