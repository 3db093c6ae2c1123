"""Task extraction for the auto-scheduler: how a network splits into fused groups, registered
with :func:`templtune.auto_scheduler.relay_integration.register_network` (the extraction
itself lives there)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from templtune.auto_scheduler.relay_integration import (
    NetworkGroup,
    register_network,
)
from templtune.auto_scheduler.relay_integration import (
    extract_tasks as _extract_tasks,
)

from .fold import fold_constants
from .fuse import FusedGroup, partition
from .ir import Function, Var
from .op import GraphError
from .simplify import simplify_for_fusion
from .transform import PassContext

__all__ = ["extract_tasks"]


def _groups(mod: Function, opt_level: int) -> Iterator[NetworkGroup]:
    pc = PassContext.current()
    fuse = opt_level >= 1 and pc.fuse
    if fuse:
        mod = simplify_for_fusion(mod, pc)
    for group in partition(mod, fuse, pc.max_fuse_depth):
        yield NetworkGroup(group.name, tuple(group.to_tensors()), group.is_simple,
                           _sparse_inputs(group))


def _sparse_inputs(group: FusedGroup) -> tuple[tuple[str, str], ...]:
    """The BSR arrays read by the group's ``nn.sparse_dense`` calls that are network
    variables, as (placeholder name, variable name); placeholders are named by position
    (:meth:`FusedGroup.to_tensors`)."""
    sparse = {id(a) for c in group.calls if c.op == "nn.sparse_dense" for a in c.args[1:]}
    return tuple((f"p{k}", e.name) for k, e in enumerate(group.inputs)
                 if id(e) in sparse and isinstance(e, Var))


register_network(Function, _groups)


def extract_tasks(mod: Function, params: dict[str, Any] | None = None, target: Any = "llvm",
                  *args: Any, **kwargs: Any) -> Any:
    """``auto_scheduler.extract_tasks`` of a graph network (same parameters and result)."""
    if not isinstance(mod, Function):
        raise GraphError(f"extract_tasks expects a graph Function, got {type(mod).__name__}")
    if params:  # the groups relay.build compiles: re-laid weights folded into parameters
        mod, params = fold_constants(mod, params)
    return _extract_tasks(mod, params, target, *args, **kwargs)
