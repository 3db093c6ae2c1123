"""Operator fusion: partition a network into groups, one compiled kernel (and one task) each.

The rule is Relay's for the patterns these networks contain: a compute-heavy *anchor* (conv2d,
dense, pooling; also concatenate) absorbs the chain of element-wise/injective ops that follows
it (bias_add, add, relu, batch_flatten) as long as each intermediate value has exactly one
consumer; softmax stands alone. A residual ``add`` joins the group of its first operand that
such a chain ends in; the other operand becomes an input of that group. Where a group's last
value has several consumers whose element-wise paths meet again (GELU reads its input twice),
the groups on those paths join it (Relay's post-dominator rule, for element-wise diamonds).
"""

from __future__ import annotations

from dataclasses import dataclass

from templtune import te
from templtune.te.tensor import ComputeOp

from .ir import Call, Expr, Function, Var, readers
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
            # NOTE: the first operand whose producer can take it (a residual add written
            # ``x + f(x)`` joins f's group)
            for prod in (a for a in c.args if isinstance(a, Call)):
                g = group_of[id(prod)]
                if (groups[g][-1] is prod and uses[id(prod)] == 1
                        and get_op(groups[g][0].op).kind != OPAQUE
                        and len(groups[g]) < max_depth):
                    target = g
                    break
        if target is None:
            groups.append([c])
            target = len(groups) - 1
        else:
            groups[target].append(c)
        group_of[id(c)] = target
    pos = {id(c): k for k, c in enumerate(calls)}
    if fuse:
        _join_diamonds(groups, group_of, calls, pos, id(func.body), max_depth)
        groups = [g for g in groups if g]
    # NOTE: a group can grow after later groups were opened (a residual add joins the block's
    # group after the shortcut's group), so run groups in the order their outputs are produced.
    groups.sort(key=lambda g: pos[id(g[-1])])
    return [make_group(g) for g in groups]


def _join_diamonds(groups: list[list[Call]], group_of: dict[int, int], calls: list[Call],
                   pos: dict[int, int], out: int, max_depth: int) -> None:
    """Merge, in place, each group whose last value several consumers read with the
    element-wise groups between it and the value where those paths meet again (Relay's
    post-dominator rule: GELU's ``x * (1 + erf(x / sqrt 2)) / 2`` reads ``x`` twice). Merged
    groups are left empty."""
    consumers = readers(calls)
    for g0, g in enumerate(groups):
        if not g or get_op(g[0].op).kind == OPAQUE or len(consumers.get(id(g[-1]), ())) < 2:
            continue
        merged = _diamond(g0, groups, group_of, consumers, pos, out, max_depth)
        if merged is None:
            continue
        groups[g0] = sorted((c for gi in merged for c in groups[gi]), key=lambda c: pos[id(c)])
        for gi in merged[1:]:
            groups[gi] = []
        for c in groups[g0]:
            group_of[id(c)] = g0


def _diamond(g0: int, groups: list[list[Call]], group_of: dict[int, int],
             consumers: dict[int, list[Call]], pos: dict[int, int], out: int,
             max_depth: int, max_groups: int = 8) -> list[int] | None:
    """The groups to merge into ``groups[g0]`` (``g0`` first), or None: grown by the groups
    reading its live values until one value alone is read outside them."""
    start = pos[id(groups[g0][0])]  # nothing before the anchor joins: it stays first
    merged, members = [g0], {id(c) for c in groups[g0]}
    while len(merged) <= max_groups:
        live = [c for gi in merged for c in groups[gi]
                if id(c) == out or any(id(u) not in members for u in consumers.get(id(c), ()))]
        # NOTE: every member feeds the one live value, so nothing read from outside can
        # depend on a member: the merged group is acyclic
        if len(live) == 1 and len(merged) > 1:
            return merged
        if any(id(c) == out for c in live):  # the network's output must stay a group output
            return None
        nxt = sorted({group_of[id(u)] for c in live for u in consumers.get(id(c), ())
                      if id(u) not in members})
        for gi in nxt:
            if any(get_op(c.op).kind != INJECTIVE or pos[id(c)] < start for c in groups[gi]):
                return None
        merged += nxt
        members |= {id(c) for gi in nxt for c in groups[gi]}
        if len(members) > max_depth:
            return None
    return None


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
