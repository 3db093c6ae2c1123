"""AutoTVM templates inside networks, through the op-strategy registry.

For each fused group whose anchor op has registered strategies for the target
(:mod:`templtune.autotvm.strategy`: direct convolution with the kernel packed once at build
time, width-vectorized direct convolution, Winograd with pre-transformed weights, packed
dense, ...), :func:`choose` picks, among the implementations with a tuning record in the
active dispatch context (``apply_history_best`` logs, then the packaged reference logs), the
one with the lowest recorded cost; with no record, the highest-priority strategy's fallback.
Weight transforms of constant weights happen once, in numpy, when the network is built. The
group's element-wise tail then runs as a second, small kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from templtune.autotvm import strategy
from templtune.autotvm.strategy import Implementation, OpCall
from templtune.autotvm.task import relay_integration
from templtune.target import Target

from .fuse import partition
from .ir import Call, Function, Var

logger = logging.getLogger("templtune.graph")

__all__ = ["Candidate", "op_call", "candidates", "choose", "instantiate",
           "extract_from_program"]

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


def instantiate(cand: Implementation, target: Any, config: Any = None
                ) -> tuple[Any, list[Any]]:
    """``(schedule, arg tensors)`` of a candidate under the active dispatch context (under
    ``config`` when given)."""
    return strategy.instantiate(cand, target, config)


def _program(mod: Function, params: Any, target: Any, ops: Iterable[str] | None
             ) -> Callable[[], None]:
    """What building ``mod`` runs of templates: each anchor's chosen implementation."""
    if not isinstance(mod, Function):
        raise TypeError(f"expected a graph Function, got {type(mod).__name__}")
    tgt = Target(target) if isinstance(target, str) else target
    wanted = None if ops is None else set(ops)
    bound = None if params is None else set(params)

    def run() -> None:
        from .alter_layout import blockable_convs, nchwc_implementation
        from .transform import PassContext

        seen: set[tuple[Any, ...]] = set()
        names = bound if bound is not None else {v.name for v in mod.params}
        # NOTE: at opt_level 3 relay.build gives these convolutions NCHW[x]c layouts: their
        # tasks are conv2d_NCHWc's (whose configs choose the blocks)
        blocked = ({id(c) for c in blockable_convs(mod, names, tgt)}
                   if PassContext.current().alter_layout else set())
        for g in partition(mod):
            anchor = g.calls[0]
            if wanted is not None and anchor.op not in wanted:
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

    return run


relay_integration.register_program(Function, _program)


def extract_from_program(mod: Function, params: Any, target: Any, target_host: Any = None,
                         ops: Any = None) -> list[Any]:
    """AutoTVM tasks of a network's anchor ops (TVM's ``autotvm.task.extract_from_program``,
    which this is): one task per distinct workload of the implementation :func:`choose` picks
    now, in first-seen order; ``ops`` restricts the anchors by op name (``["nn.conv2d"]``)."""
    return relay_integration.extract_from_program(mod, params, target, target_host, ops)
