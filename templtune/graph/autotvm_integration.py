"""AutoTVM templates inside networks, through the op-strategy registry.

For each fused group whose anchor op has registered strategies for the target
(:mod:`templtune.autotvm.strategy`: direct convolution with the kernel packed once at build
time, width-vectorized direct convolution, Winograd with pre-transformed weights, packed
dense, ...), :func:`choose` picks, among the implementations with a tuning record in the
active dispatch context (``apply_history_best`` logs, then the packaged reference logs), the
one with the lowest recorded cost; with no record, the highest-priority strategy's fallback.
Weight transforms of constant weights happen once, in numpy, when the network is built.

The group's element-wise tail (bias, batch-norm scale and shift, residual add, relu, clip:
the leading calls with the anchor's shape) becomes the template's :class:`Epilogue`
(:func:`fused_tail`) when its strategy takes one: computed in the template's output stage, no
second kernel. Ops after that (a reshape, ``batch_flatten``) run as a second, small kernel, and
so does the whole tail of a template without epilogue support.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, EpilogueInput
from templtune.autotvm.strategy import Implementation, OpCall
from templtune.autotvm.task import relay_integration
from templtune.target import Target

from .fold import fold_constants
from .fuse import FusedGroup, make_group, partition
from .ir import Call, Expr, Function, Var
from .op import get_op, is_depthwise

logger = logging.getLogger("templtune.graph")

__all__ = ["Candidate", "FusedTail", "op_call", "candidates", "choose", "configured",
           "instantiate", "fused_tail", "extract_from_program", "blocked_alternatives"]

#: injective ops that move elements (an epilogue computes each output element in place)
_REMAPPING = frozenset({"reshape", "transpose", "strided_slice", "nn.pad", "image.resize2d",
                        "nn.batch_flatten", "layout_transform"})

#: the blocked depthwise convolution the alter-layout pass writes
DEPTHWISE_NCHWC = "nn.contrib_depthwise_conv2d_NCHWc"

#: an implementation of an anchor op (the registry's type; the old name is kept)
Candidate = Implementation


def op_call(call: Call) -> OpCall:
    """What the strategies see of a graph call."""
    return OpCall(call.op, tuple(a.shape for a in call.args), call.dtype, call.shape,
                  call.attrs)


def candidates(call: Call, target: Any = None) -> list[Implementation]:
    """The template implementations of ``call`` on ``target`` (default ``llvm``; empty when
    none applies), highest-priority strategy first."""
    return strategy.implementations(op_call(call), target)


def choose(call: Call, target: Any, allow_transform: bool = True) -> Implementation | None:
    """The fastest recorded implementation of ``call``, else the registered fallback (only
    implementations taking the weight as is when not ``allow_transform``)."""
    return strategy.select(op_call(call), target, allow_transform)


def configured(call: Call, target: Any) -> Implementation | None:
    """The implementation a graph pass's config for ``call`` (its ``autotvm_config``) belongs
    to: the op's first registered implementation, the direct template whose records the
    alter-layout pass and the graph tuner choose among (None: none applies)."""
    impls = strategy.implementations(op_call(call), target)
    return impls[0] if impls else None


def instantiate(cand: Implementation, target: Any, epilogue: Epilogue | None = None,
                config: Any = None) -> tuple[Any, list[Any]]:
    """``(schedule, arg tensors)`` of a candidate under the active dispatch context (under
    ``config`` when given; with ``epilogue`` computed in its output stage)."""
    return strategy.instantiate(cand, target, epilogue, config)


@dataclass(frozen=True, slots=True)
class FusedTail:
    """The part of a group's tail a template computes as its epilogue: the :class:`Epilogue`,
    the graph values its extra inputs are (kernel arguments after the anchor's), the number
    of the group's calls (anchor included) the fused kernel computes, and the last of them
    (the fused kernel's output value)."""

    epilogue: Epilogue
    inputs: tuple[Expr, ...]
    n_calls: int
    output: Call


def _ref(e: Expr, anchor: Call, extras: list[Expr], tail: tuple[Call, ...]) -> str:
    if e is anchor:
        return "out"
    for j, c in enumerate(tail):
        if e is c:
            return f"t{j}"
    return f"in{next(k for k, x in enumerate(extras) if x is e)}"


def fused_tail(group: FusedGroup) -> FusedTail | None:
    """The group's leading element-wise tail as an epilogue of its anchor (None: the anchor
    has no such tail): the calls after the anchor that keep its shape and dtype, move no
    element, and whose intermediate values no later call of the group reads."""
    anchor, calls = group.calls[0], group.calls
    n = 1
    while (n < len(calls) and calls[n].shape == anchor.shape and calls[n].dtype == anchor.dtype
           and calls[n].op not in _REMAPPING):
        n += 1
    # NOTE: the fused kernel writes only its last value; a later call must read no other.
    while n > 1 and {id(c) for c in calls[:n - 1]} & {id(a) for c in calls[n:] for a in c.args}:
        n -= 1
    if n == 1:
        return None
    tail = tuple(calls[1:n])
    extras = [e for e in make_group(tail).inputs if e is not anchor]
    key = repr((anchor.shape, anchor.dtype, [e.shape for e in extras],
                [(c.op, c.attrs, [_ref(a, anchor, extras, tail) for a in c.args])
                 for c in tail]))

    def build(out: Any, ins: Any) -> Any:
        env: dict[int, Any] = {id(anchor): out}
        env.update({id(e): t for e, t in zip(extras, ins)})
        for c in tail:
            env[id(c)] = get_op(c.op).compute([env[id(a)] for a in c.args], dict(c.attrs))
        return env[id(tail[-1])]

    ep = Epilogue(tuple(EpilogueInput(tuple(e.shape), e.dtype) for e in extras), build, key,
                  tuple(c.op for c in tail))
    return FusedTail(ep, tuple(extras), n, calls[n - 1])


def _program(mod: Function, params: Any, target: Any, ops: Iterable[str] | None
             ) -> Callable[[], None]:
    """What building ``mod`` runs of templates: each anchor's chosen implementation."""
    if not isinstance(mod, Function):
        raise TypeError(f"expected a graph Function, got {type(mod).__name__}")
    tgt = Target(target) if isinstance(target, str) else target
    wanted = None if ops is None else set(ops)
    if params:  # as relay.build sees it: re-laid weights and huge-fill wheres folded
        mod, params = fold_constants(mod, params)
    bound = None if params is None else set(params)

    def run() -> None:
        from .alter_layout import blockable_convs, nchwc_implementation
        from .attention import fuse_attention_for
        from .simplify import simplify_for_fusion
        from .transform import PassContext

        seen: set[tuple[Any, ...]] = set()
        names = bound if bound is not None else {v.name for v in mod.params}
        # NOTE: the anchors build partitions: SimplifyExpr may change them (batch_matmul flags)
        pc = PassContext.current()
        net = fuse_attention_for(simplify_for_fusion(mod, pc), pc, tgt)
        # NOTE: at opt_level 3 relay.build gives these convolutions NCHW[x]c layouts: their
        # tasks are conv2d_NCHWc's (whose configs choose the blocks); extraction assumes
        # opt_level 3, as TVM's does
        blocked = ({id(c) for c in blockable_convs(net, names, tgt)}
                   if PassContext.current().extracts_blocked else set())
        # NOTE: a depthwise conv takes its input's blocking, which the convs before it chose:
        # its tasks are those of the network the pass rewrites (which needs the weights), run
        # last so that the conv tasks it traces again keep their first-seen order
        rewrite_dw = bool(blocked and params and (wanted is None or "nn.conv2d" in wanted))
        for g in partition(net):
            anchor = g.calls[0]
            if wanted is not None and anchor.op not in wanted:
                continue
            if rewrite_dw and _is_depthwise(anchor):
                continue
            weight = anchor.args[1] if len(anchor.args) > 1 else None
            # NOTE: as build decides: only a bound parameter may be pre-transformed (params=None:
            # every weight counts as bound).
            const = bound is None or (isinstance(weight, Var) and weight.name in bound)
            cand = (nchwc_implementation(anchor, tgt) if id(anchor) in blocked
                    else choose(anchor, tgt, allow_transform=const))
            if cand is None or cand.workload in seen:
                continue
            seen.add(cand.workload)
            instantiate(cand, tgt)
        for anchor in _depthwise_anchors(mod, params, tgt) if rewrite_dw else ():
            cand = choose(anchor, tgt)
            if cand is not None and cand.workload not in seen:
                seen.add(cand.workload)
                instantiate(cand, tgt)

    return run


def _is_depthwise(call: Call) -> bool:
    return (call.op == "nn.conv2d" and call.attr("data_layout") == "NCHW"
            and is_depthwise(call.attr("groups", 1), call.args[0].shape[1], call.shape[1]))


def _depthwise_anchors(mod: Function, params: Any, tgt: Target) -> list[Call]:
    """The depthwise convolutions of ``mod`` as the alter-layout pass rewrites them (blocked
    ones as ``nn.contrib_depthwise_conv2d_NCHWc`` in their input's blocking), in order."""
    from .alter_layout import alter_op_layout

    new, _ = alter_op_layout(mod, dict(params), tgt)
    return [g.calls[0] for g in partition(new)
            if _is_depthwise(g.calls[0]) or g.calls[0].op == DEPTHWISE_NCHWC]


relay_integration.register_program(Function, _program)


def extract_from_program(mod: Function, params: Any, target: Any, target_host: Any = None,
                         ops: Any = None) -> list[Any]:
    """AutoTVM tasks of a network's anchor ops (TVM's ``autotvm.task.extract_from_program``,
    which this is): one task per distinct workload of the implementation :func:`choose` picks
    now, in first-seen order; ``ops`` restricts the anchors by op name (``["nn.conv2d"]``)."""
    return relay_integration.extract_from_program(mod, params, target, target_host, ops)


def blocked_alternatives(mod: Function, params: Any, target: Any) -> list[Any]:
    """AutoTVM tasks of the other blocked implementations (Winograd) of a network's blocked
    convolutions, each at the blocking its direct ``conv2d_NCHWc`` config chooses now (a
    record's or the fallback's) when that blocking is one the alter-layout pass looks up:
    tuning them lets a layer trade its direct kernel for a faster one with no layout transform.
    A templtune addition: :func:`extract_from_program` keeps TVM's one task per anchor."""
    from templtune.autotvm.task import create

    from .alter_layout import (
        BLOCKS,
        blockable_convs,
        config_blocks,
        nchwc_implementation,
        other_blocked,
    )

    tgt = Target(target) if isinstance(target, str) else target
    if params:
        mod, params = fold_constants(mod, params)
    names = set(params) if params is not None else {v.name for v in mod.params}
    seen: dict[tuple[str, tuple[Any, ...]], Any] = {}
    for conv in blockable_convs(mod, names, tgt):
        direct = nchwc_implementation(conv, tgt)
        assert direct is not None
        # NOTE: current_config fills a fallback's knobs: its blocks can be read off directly
        ic_bn, oc_bn = config_blocks(strategy.current_config(direct, tgt))
        if ic_bn != oc_bn or ic_bn not in BLOCKS:
            continue
        for _, impl in other_blocked(conv, tgt, (ic_bn,), direct):
            key = (impl.template, tuple(impl.args))
            if key not in seen:
                seen[key] = create(impl.template, impl.args, tgt)
    return list(seen.values())
