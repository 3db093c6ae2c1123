"""Compile a network: fuse, pick an implementation for each group, build its kernels.

Per fused group, in order of preference:

1. a record of the enclosing ``auto_scheduler.ApplyHistoryBest`` for the group's workload key
   (the key ``extract_tasks`` gave the task): one kernel for the whole group;
2. an AutoTVM template registered as a strategy of the group's anchor op for the target
   (:mod:`templtune.autotvm.strategy`), chosen and configured by the active AutoTVM dispatch
   context (``autotvm.apply_history_best`` logs, then the packaged reference logs, then
   fallback configs; see :mod:`templtune.graph.autotvm_integration`), with constant weights
   transformed once by the strategy's weight transform; the group's element-wise tail is
   computed in the template's output stage (a fused epilogue, when the strategy takes one and
   ``templtune.graph.fuse_epilogues`` is on), what follows it as a second kernel;
3. a default schedule (:mod:`templtune.graph.default_schedules`, registered per target key): on
   a CPU the leading spatial loops fused and parallel, the innermost one vectorized by the
   target's lanes; on a GPU every stage's outputs spread over blocks of threads.

Equal groups share their kernels. At ``opt_level >= 3`` the ``AlterOpLayout`` pass
(:mod:`templtune.graph.alter_layout`) first gives the convolutions NCHW[x]c layouts; before
partitioning, ``SimplifyExpr`` (:mod:`templtune.graph.simplify`) and ``FuseAttention``
(:mod:`templtune.graph.attention`) rewrite the network.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import templtune
from templtune import te
from templtune.auto_scheduler.compute_dag import ComputeDAG
from templtune.auto_scheduler.dispatcher import ApplyHistoryBest
from templtune.auto_scheduler.layout_rewrite import rewrite_layout
from templtune.auto_scheduler.replay import replay_schedule
from templtune.autotvm.dispatcher import DispatchContext
from templtune.errors import TempltuneError
from templtune.target import Target

from .attention import fuse_attention_for
from .autotvm_integration import (
    Candidate,
    FusedTail,
    choose,
    configured,
    fused_tail,
    instantiate,
)
from .default_schedules import default_schedule
from .fold import fold_constants
from .fuse import FusedGroup, make_group, partition
from .ir import Call, Expr, Function, Var
from .memory_plan import View
from .op import GraphError
from .simplify import simplify_for_fusion
from .transform import PassContext

logger = logging.getLogger("templtune.graph")

@dataclass(frozen=True, slots=True)
class Step:
    """One kernel call: ``kernel(*inputs, output)``; an input is a graph value or a constant
    (a weight pre-transformed at build time)."""

    kernel: Any
    inputs: tuple[Any, ...]
    output: Expr
    #: positions of inputs the kernel may write its output over (see graph.memory_plan.Use)
    inplace: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CompiledGroup:
    """One fused group: its kernel calls, workload key, whether a tuning record chose its
    schedule, and which implementation runs it (``auto_scheduler``, ``autotvm:<template>`` or
    ``default``)."""

    group: FusedGroup
    steps: tuple[Step, ...]
    workload_key: str
    tuned: bool
    impl: str = "default"

    @property
    def kernel(self) -> Any:
        """The group's main kernel (its only one unless a template runs its anchor and not
        all of its tail)."""
        return self.steps[0].kernel

    @property
    def kernels(self) -> tuple[Any, ...]:
        """The compiled kernels its steps call (a :class:`View` step calls none)."""
        return tuple(st.kernel for st in self.steps if not isinstance(st.kernel, View))


def _check_inputs(anchor: Call, cand: Candidate, tensors: list[Any]) -> None:
    """Raise ``ValueError`` where the template's kernel takes another shape than the
    anchor's input it will be given (a blocked call whose config chooses other blocks than its
    layouts hold: same sizes, so it would compute on misread data)."""
    for i, a in enumerate(anchor.args):
        if i == cand.weight and cand.transform is not None:
            continue  # given transformed, in the template's own layout
        got = tuple(int(d) for d in tensors[i].shape)
        if got != tuple(a.shape):
            raise ValueError(f"its kernel takes input {i} as {got}, the network gives "
                             f"{tuple(a.shape)}")


def _auto_scheduled(group: FusedGroup, target: Target, use_records: bool, consts: set[int]
                    ) -> tuple[Any, list[te.Tensor], str, dict[int, Any]]:
    """``(schedule, tensors, workload_key, layouts)`` of the auto-scheduler record for the
    group, with ``schedule`` None when there is none. ``layouts`` maps an input position to the
    :class:`RewrittenLayout` its constant must be given in (REWRITE_FOR_PRE_TRANSFORMED);
    ``consts`` are the positions of the group's inputs that are bound parameters."""
    tensors = group.to_tensors()
    dag = ComputeDAG(tensors)
    key = dag.workload_key()
    ctx = ApplyHistoryBest.current() if use_records else None
    state = ctx.query(target, key, dag=dag) if ctx is not None else None
    if state is None:
        return None, tensors, key, {}
    full = dag.replay(state.transform_steps)
    gpu = target.capabilities.is_gpu
    sch, args = replay_schedule(dag, full, gpu, 0)
    if gpu:
        # NOTE: GPU sketches stage their tiles through shared memory and are measured without
        # a layout rewrite (as TVM's), so the kernel takes the weights as they are.
        return sch, list(args), key, {}
    done = rewrite_layout(dag, sch, pre_transformed=True)
    pos = {id(t): k for k, t in enumerate(tensors)}
    if any(pos[id(orig)] not in consts for orig, _, _ in done):
        # NOTE: a re-laid input that is not a constant: re-lay it inside the kernel, as the
        # task was measured (INSERT_TRANSFORM_STAGE).
        sch, args = dag.apply_steps_from_state(full, layout_rewrite=1)
        return sch, list(args), key, {}
    swap = {id(orig): new for orig, new, _ in done}
    layouts = {pos[id(orig)]: lay for orig, _, lay in done}
    return sch, [swap.get(id(t), t) for t in args], key, layouts


def _c_name(name: str) -> str:
    """``name`` as a C identifier (template names such as ``dense.cuda`` carry dots)."""
    return re.sub(r"\W", "_", name)


class _Compiler:
    """Builds the groups of one network, sharing kernels and transformed weights."""

    def __init__(self, target: Target, params: dict[str, np.ndarray], pc: PassContext) -> None:
        self.target, self.params, self.pc = target, params, pc
        self.kernels: dict[str, Any] = {}
        self.consts: dict[tuple[str, Any], np.ndarray] = {}
        self.choices: dict[tuple[Any, ...], Candidate | None] = {}

    def kernel(self, key: str, make: Any, name: str) -> Any:
        if key not in self.kernels:
            sch, tensors = make()
            self.kernels[key] = templtune.build(sch, tensors, target=self.target, name=name)
        return self.kernels[key]

    def const(self, name: str, key: Any, transform: Callable[[np.ndarray], np.ndarray]
              ) -> np.ndarray:
        """Parameter ``name`` transformed (packed, re-laid) once per (name, key)."""
        if (name, key) not in self.consts:
            self.consts[(name, key)] = transform(self.params[name])
        return self.consts[(name, key)]

    def view(self, calls: tuple[Call, ...], src: Expr) -> Step | None:
        """A step that runs no kernel for ``calls`` when they only reshape ``src``, a value a
        kernel writes, on a host target (the host runtime gives a view of its memory)."""
        if (not calls or self.target.capabilities.is_gpu or not isinstance(src, Call)
                or any(c.op != "reshape" for c in calls)):
            return None
        return Step(View(calls[-1].shape), (src,), calls[-1])

    def compile(self, group: FusedGroup) -> CompiledGroup:
        view = self.view(group.calls, group.inputs[0]) if len(group.inputs) == 1 else None
        if view is not None:
            return CompiledGroup(group, (view,), "", False, "view")
        consts = {k for k, e in enumerate(group.inputs)
                  if isinstance(e, Var) and e.name in self.params}
        sch, tensors, key, layouts = _auto_scheduled(group, self.target,
                                                     self.pc.use_auto_scheduler, consts)
        tuned = sch is not None
        if not tuned and self.pc.use_templates:
            via_template = self._template(group, key)
            if via_template is not None:
                return via_template
        make = (lambda: (sch, tensors)) if tuned else (
            lambda: (default_schedule(tensors, self.target), tensors))
        k = self.kernel(key + repr(sorted(layouts)), make, group.name)
        inputs: list[Any] = list(group.inputs)
        for pos, lay in layouts.items():
            inputs[pos] = self.const(group.inputs[pos].name, lay,  # type: ignore[union-attr]
                                     lay.transform)
        step = Step(k, tuple(inputs), group.output)
        return CompiledGroup(group, (step,), key, tuned, "auto_scheduler" if tuned else "default")

    def _choose(self, anchor: Call, const: bool) -> Candidate | None:
        # NOTE: equal layers ask once: without a record, choosing instantiates the template.
        sig = (anchor.op, anchor.attrs, tuple(a.shape for a in anchor.args), const)
        if sig not in self.choices:
            self.choices[sig] = choose(anchor, self.target, allow_transform=const)
        return self.choices[sig]

    def _template(self, group: FusedGroup, key: str) -> CompiledGroup | None:
        anchor = group.calls[0]
        weight = anchor.args[1] if len(anchor.args) > 1 else None
        const = isinstance(weight, Var) and weight.name in self.params
        # NOTE: a layer whose config the alter-layout pass chose (its blocking) runs that one,
        # on the template it belongs to, even where another implementation (Winograd) has a
        # faster record in a parent context: that config has only the direct template's knobs
        config = anchor.attr("autotvm_config")
        cand = self._choose(anchor, const) if config is None else configured(anchor, self.target)
        if cand is None:
            return None
        ft = fused_tail(group) if cand.epilogue and self.pc.fuse_epilogues else None
        k = self._template_kernel(group, cand, ft, config)
        if k is None and ft is not None:
            ft = None
            k = self._template_kernel(group, cand, None, config)
        if k is None:
            return None
        inputs: list[Any] = list(anchor.args)
        if cand.transform is not None:
            w = anchor.args[cand.weight]
            assert isinstance(w, Var)
            inputs[cand.weight] = self.const(w.name, cand.workload, cand.transform)
        n_done = 1 if ft is None else ft.n_calls
        over: tuple[int, ...] = ()
        if ft is not None:
            # NOTE: an epilogue reads an input of its output's shape only where it writes
            over = tuple(len(inputs) + j for j, e in enumerate(ft.inputs)
                         if e.shape == ft.output.shape and e.dtype == ft.output.dtype)
            inputs += ft.inputs
        steps = [Step(k, tuple(inputs), group.calls[n_done - 1], over)]
        view = self.view(group.calls[n_done:], group.calls[n_done - 1])
        if view is not None:
            steps.append(view)
        elif len(group.calls) > n_done:
            tail = make_group(group.calls[n_done:])
            tt = tail.to_tensors()
            tk = ComputeDAG(tt).workload_key()
            tail_k = self.kernel(tk, lambda: (default_schedule(tt, self.target), tt), tail.name)
            steps.append(Step(tail_k, tail.inputs, group.output))
        cost = DispatchContext.current.query_cost(self.target, cand.workload)
        tuned = cost is not None if config is None else not config.is_fallback
        return CompiledGroup(group, tuple(steps), key, tuned, f"autotvm:{cand.name}")

    def _template_kernel(self, group: FusedGroup, cand: Candidate, ft: FusedTail | None,
                         config: Any = None) -> Any:
        """The template's kernel (with ``ft``'s epilogue fused; under ``config`` when given),
        None when it cannot be built; keyed by the anchor's workload, the config and the
        epilogue, so equal layers share it."""
        ep = None if ft is None else ft.epilogue
        # NOTE: the args too: a pre-transformed variant shares its plain task's workload
        key = (repr((cand.workload, cand.args)) + ("" if config is None else repr(config))
               + ("" if ep is None else "|" + ep.key))
        name = _c_name(f"{group.name}_{cand.name}")
        anchor = group.calls[0]

        def make() -> tuple[Any, list[Any]]:
            # NOTE: config only when a pass chose one (instantiate's signature otherwise)
            extra = {} if config is None else {"config": config}
            sch, tensors = instantiate(cand, self.target, ep, **extra)
            _check_inputs(anchor, cand, tensors)
            return sch, tensors

        try:
            return self.kernel(key, make, name)
        except (TempltuneError, ValueError) as exc:
            fallback = "without the epilogue" if ep is not None else "the default schedule"
            logger.warning("template %s cannot run %s%s (%s); using %s", cand.name, group.name,
                           "" if ep is None else f" with epilogue {ep.name}", exc, fallback)
            return None


class GraphExecutorFactoryModule:
    """What :func:`build` returns: the compiled groups plus the bound parameters.

    ``lib["default"](dev)`` gives the runtime that ``GraphModule`` wraps, as in TVM."""

    def __init__(self, func: Function, groups: list[CompiledGroup], params: dict[str, np.ndarray],
                 target: Target, mod_name: str = "default") -> None:
        self.func, self.groups, self.params, self.target = func, groups, params, target
        self.libmod_name = mod_name

    def __getitem__(self, key: str) -> Any:
        if key != self.libmod_name:
            raise KeyError(f"this built network is {self.libmod_name!r} (relay.build's "
                           f"mod_name), not {key!r}")
        from .executor import create_runtime

        return lambda dev=None: create_runtime(self, dev)

    def get_params(self) -> dict[str, np.ndarray]:
        return dict(self.params)

    @property
    def num_tuned(self) -> int:
        return sum(g.tuned for g in self.groups)

    def __repr__(self) -> str:
        return (f"GraphExecutorFactoryModule({len(self.groups)} kernels, {self.num_tuned} tuned, "
                f"target={self.target})")


def _numpy(x: Any) -> np.ndarray:
    """A numpy view of an array or an ``NDArray``."""
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def _check_params(func: Function, params: dict[str, Any]) -> dict[str, np.ndarray]:
    byname = {v.name: v for v in func.params}
    out: dict[str, np.ndarray] = {}
    for name, value in params.items():
        v = byname.get(name)
        if v is None:
            raise GraphError(f"parameter {name!r} is not an input of the network")
        arr = np.ascontiguousarray(np.asarray(_numpy(value), dtype=v.dtype))
        if arr.shape != v.shape:
            raise GraphError(f"parameter {name!r} has shape {arr.shape}, expected {v.shape}")
        out[name] = arr
    return out


def _alter_layout(mod: Function, pc: PassContext, tgt: Target) -> bool:
    """Whether to run AlterOpLayout: a CPU target (NCHW[x]c is an x86 layout), the context
    allows it, the network has a convolution, and no auto-scheduler records apply (they were
    tuned on the network's own groups)."""
    if tgt.capabilities.is_gpu or not pc.alter_layout or \
            not any(c.op == "nn.conv2d" for c in mod.calls()):
        return False
    return not pc.auto_scheduler_records


def build(mod: Function, target: Any = None, params: dict[str, Any] | None = None,
          target_host: Any = None, mod_name: str = "default") -> GraphExecutorFactoryModule:
    """Compile a network (``relay.build``): fuse, schedule, and build every group.

    Parameters
    ----------
    mod : Function
        The network (``mod["main"]`` also works).
    target : str or Target, optional
        Default: the enclosing ``with Target(...)``, else ``llvm``.
    params : dict of str to array, optional
        Values bound to parameters (weights); the remaining variables are run-time inputs.
    mod_name : str
        The built module's name: ``lib[mod_name](dev)`` creates the runtime.

    Returns
    -------
    GraphExecutorFactoryModule
    """
    if not isinstance(mod, Function):
        raise GraphError(f"build expects a graph Function, got {type(mod).__name__}")
    tgt = Target(target) if isinstance(target, str) else (target or Target.current()
                                                          or Target("llvm"))
    bound = _check_params(mod, params or {})
    # NOTE: weights re-laid by ConvertLayout become parameters once, here, not per run
    mod, bound = fold_constants(mod, bound)
    pc = PassContext.current()
    if _alter_layout(mod, pc, tgt):
        from .alter_layout import alter_op_layout

        mod, bound = pc.run_pass("AlterOpLayout", 3, mod,
                                 lambda: alter_op_layout(mod, bound, tgt), ("InferType",))
    compiler = _Compiler(tgt, bound, pc)
    mod = fuse_attention_for(simplify_for_fusion(mod, pc), pc, tgt)
    groups = pc.run_pass("FuseOps", 0, mod, lambda: partition(mod, pc.fuse, pc.max_fuse_depth),
                         ("InferType",))
    compiled = [compiler.compile(g) for g in groups]
    n_tuned = sum(c.tuned for c in compiled)
    if n_tuned < len(compiled):
        logger.info("%d of %d groups have no tuning record (default schedules or template "
                    "fallback configs)", len(compiled) - n_tuned, len(compiled))
    return GraphExecutorFactoryModule(mod, compiled, bound, tgt, mod_name)


def input_vars(mod: Function, params: dict[str, Any]) -> list[Var]:
    """The network's run-time inputs (its variables that are not bound parameters)."""
    return [v for v in mod.params if v.name not in params]
