"""The network IR: a dataflow graph of typed operator calls (a small, Relay-shaped subset).

A network is a :class:`Function` whose ``body`` is the output :class:`Call`; calls refer to their
inputs directly, so the graph is a DAG of frozen nodes. Node identity (not structure) names an
edge: two identical calls are two computations, as in Relay before common-subexpression
elimination.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Attrs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True, eq=False)
class TensorType:
    """Shape and dtype of a value."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __str__(self) -> str:
        return f"Tensor[({', '.join(map(str, self.shape))}), {self.dtype}]"


class _Typed:
    """``shape`` and ``dtype`` of a node's ``type``."""

    __slots__ = ()
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype


@dataclass(frozen=True, slots=True, eq=False)
class Var(_Typed):
    """A network input or a parameter (weights are parameters bound at build time)."""

    name: str
    type: TensorType


@dataclass(frozen=True, slots=True, eq=False)
class Call(_Typed):
    """``op(*args, **attrs)`` with its inferred result type."""

    op: str
    args: tuple[Expr, ...]
    attrs: Attrs
    type: TensorType

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


Expr = Var | Call


@dataclass(frozen=True, slots=True, eq=False)
class Function:
    """A network: its inputs and parameters (``params``) and its output expression."""

    params: tuple[Var, ...]
    body: Call
    name: str = field(default="main")

    def calls(self) -> list[Call]:
        """Every call, producers before consumers (a deterministic topological order)."""
        return topo_order(self.body)

    def __getitem__(self, key: str) -> Function:
        # NOTE: ``mod["main"]`` in TVM tutorials; a Function stands in for its own module.
        if key != self.name:
            raise KeyError(f"this network has only the function {self.name!r}, not {key!r}")
        return self

    def __str__(self) -> str:
        names: dict[int, str] = {id(v): f"%{v.name}" for v in self.params}
        lines = [f"fn ({', '.join(f'%{v.name}: {v.type}' for v in self.params)}) {{"]
        for k, c in enumerate(self.calls()):
            args = ", ".join(names.get(id(a), "?") for a in c.args)
            attrs = "".join(f", {a}={v}" for a, v in c.attrs)
            names[id(c)] = f"%{k}"
            lines.append(f"  %{k} = {c.op}({args}{attrs}) /* ty={c.type} */;")
        lines.append(f"  {names[id(self.body)]}")
        lines.append("}")
        return "\n".join(lines)


def readers(calls: list[Call]) -> dict[int, list[Call]]:
    """The calls among ``calls`` that read each value (by ``id``), in ``calls``' order."""
    out: dict[int, list[Call]] = {}
    for c in calls:
        for a in c.args:
            out.setdefault(id(a), []).append(c)
    return out


def topo_order(out: Expr) -> list[Call]:
    """Calls reachable from ``out`` in post order (iterative: networks are deep)."""
    order: list[Call] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(out, False)]
    while stack:
        node, expanded = stack.pop()
        if not isinstance(node, Call):
            continue
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for a in reversed(node.args):
            if isinstance(a, Call) and id(a) not in seen:
                stack.append((a, False))
    return order
