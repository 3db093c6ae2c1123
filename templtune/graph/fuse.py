"""Operator fusion: partition a network into groups, one compiled kernel (and one task) each.

The rule is Relay's for the patterns these networks contain: a compute-heavy *anchor* (conv2d,
dense, pooling) absorbs the chain of element-wise/injective ops that follows it (bias_add, add,
relu, batch_flatten) as long as each intermediate value has exactly one consumer; softmax stands
alone. A residual ``add`` joins the group of its first operand; the other operand becomes an
input of that group.
"""

from __future__ import annotations

from dataclasses import dataclass

from templtune import te
from templtune.te.tensor import ComputeOp

from .ir import Call, Expr, Function, Var
from .op import INJECTIVE, OPAQUE, get_op


@dataclass(frozen=True, slots=True, eq=False)
class FusedGroup:
    """Calls fused into one kernel (``calls[-1]`` is its output) and its external inputs."""

    calls: tuple[Call, ...]
    inputs: tuple[Expr, ...]

    @property
    def output(self) -> Call:
        return self.calls[-1]

    @property
    def name(self) -> str:
        return "fused_" + "_".join(c.op.replace(".", "_") for c in self.calls)

    @property
    def is_simple(self) -> bool:
        """No reduction inside (Ansor skips such tasks unless ``include_simple_tasks``)."""
        return all(get_op(c.op).kind == INJECTIVE for c in self.calls)

    def to_tensors(self) -> list[te.Tensor]:
        """The group as te tensors: one placeholder per input, then the output tensor.

        Placeholders are named by position, so that equal layers give equal compute DAGs (and
        one shared workload key)."""
        env: dict[int, te.Tensor] = {}
        ins = []
        for k, e in enumerate(self.inputs):
            ph = te.placeholder(e.shape, dtype=e.dtype, name=f"p{k}")
            env[id(e)] = ph
            ins.append(ph)
        out = None
        for c in self.calls:
            out = get_op(c.op).compute([env[id(a)] for a in c.args], dict(c.attrs))
            if c.op in _WEIGHTED and isinstance(c.args[1], Var):
                out = _layout_free(out, env[id(c.args[1])])
            env[id(c)] = out
        assert out is not None
        return [*ins, out]


_WEIGHTED = ("nn.conv2d", "nn.dense")


def _layout_free(out: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """``out`` with its weight marked ``layout_free_placeholders`` (TVM's attribute): the
    auto-scheduler may then re-lay the weight to follow its tiles (pre-transformed once when
    the network is built). The compute DAG's text, hence its workload key, is unchanged."""
    import dataclasses

    from templtune.auto_scheduler.layout_rewrite import LAYOUT_FREE_ATTR

    op = out.op
    if not any(t is weight for t in op.input_tensors):
        return out
    assert isinstance(op, ComputeOp)  # a weight is read by a compute
    attrs = tuple(sorted({**dict(op.attrs), LAYOUT_FREE_ATTR: [weight]}.items()))
    return dataclasses.replace(op, attrs=attrs).output(0)


def _consumers(calls: list[Call], out: Call) -> dict[int, int]:
    count: dict[int, int] = {id(out): 1}
    for c in calls:
        for a in c.args:
            count[id(a)] = count.get(id(a), 0) + 1
    return count


def partition(func: Function, fuse: bool = True, max_depth: int = 256) -> list[FusedGroup]:
    """The fused groups of ``func`` in execution order (one op per group when not ``fuse``;
    at most ``max_depth`` ops per group)."""
    calls = func.calls()
    uses = _consumers(calls, func.body)
    groups: list[list[Call]] = []
    group_of: dict[int, int] = {}
    for c in calls:
        target = None
        if fuse and get_op(c.op).kind == INJECTIVE:
            prod = next((a for a in c.args if isinstance(a, Call)), None)
            if prod is not None:
                g = group_of[id(prod)]
                if (groups[g][-1] is prod and uses[id(prod)] == 1
                        and get_op(groups[g][0].op).kind != OPAQUE
                        and len(groups[g]) < max_depth):
                    target = g
        if target is None:
            groups.append([c])
            target = len(groups) - 1
        else:
            groups[target].append(c)
        group_of[id(c)] = target
    # NOTE: a group can grow after later groups were opened (a residual add joins the block's
    # group after the shortcut's group), so run groups in the order their outputs are produced.
    pos = {id(c): k for k, c in enumerate(calls)}
    groups.sort(key=lambda g: pos[id(g[-1])])
    return [make_group(g) for g in groups]


def make_group(calls: list[Call] | tuple[Call, ...]) -> FusedGroup:
    """A group of ``calls`` (in order) whose inputs are the values they read from outside."""
    inside = {id(c) for c in calls}
    seen: set[int] = set()
    inputs: list[Expr] = []
    for c in calls:
        for a in c.args:
            if id(a) not in inside and id(a) not in seen:
                seen.add(id(a))
                inputs.append(a)
    return FusedGroup(tuple(calls), tuple(inputs))
