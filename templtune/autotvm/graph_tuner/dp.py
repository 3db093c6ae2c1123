"""``DPTuner``: the exact minimum by dynamic programming over the network's order.

Nodes are eliminated in execution order (variable elimination, min-sum): eliminating a node
combines every cost table it appears in and keeps, for each choice of the nodes those tables
also mention, the node's best choice and its cost. A ResNet's live set (a block's input and
its shortcut) stays small, so the tables do too; back-substitution in reverse order reads the
optimal choice off them.
"""

from __future__ import annotations

import math

import numpy as np

from .base import BaseGraphTuner, Edge, GraphTunerError

__all__ = ["DPTuner", "solve_dp"]

#: the largest cost table the elimination may build (entries)
MAX_TABLE = 1 << 24


def _aligned(scope: tuple[int, ...], table: np.ndarray, full: tuple[int, ...]) -> np.ndarray:
    """``table`` over ``scope`` as an array broadcastable over ``full``."""
    order = sorted(range(len(scope)), key=lambda k: full.index(scope[k]))
    t = np.transpose(table, order)
    shape = [1] * len(full)
    for k in order:
        shape[full.index(scope[k])] = table.shape[k]
    return t.reshape(shape)


def solve_dp(unary: list[np.ndarray], edges: list[Edge]) -> list[int]:
    """The choice per node minimising the unary plus pairwise costs, exactly."""
    factors: list[tuple[tuple[int, ...], np.ndarray]] = [((k,), u) for k, u in
                                                         enumerate(unary)]
    factors += [((e.u, e.v), e.cost) for e in edges]
    sizes = [len(u) for u in unary]
    argmins: list[tuple[int, tuple[int, ...], np.ndarray]] = []
    for v in range(len(unary)):
        mine = [f for f in factors if v in f[0]]
        factors = [f for f in factors if v not in f[0]]
        full = tuple(sorted({n for s, _ in mine for n in s}))
        if math.prod(sizes[n] for n in full) > MAX_TABLE:
            raise GraphTunerError(f"DPTuner: the table over {len(full)} nodes is too "
                                  f"large; use PBQPTuner for this graph")
        total = sum(_aligned(s, t, full) for s, t in mine)
        total = np.broadcast_to(total, tuple(sizes[n] for n in full))
        axis = full.index(v)
        rest = tuple(n for n in full if n != v)
        argmins.append((v, rest, np.argmin(total, axis=axis)))
        factors.append((rest, np.min(total, axis=axis)))
    choice = [0] * len(unary)
    for v, rest, table in reversed(argmins):
        choice[v] = int(table[tuple(choice[n] for n in rest)]) if rest else int(table)
    return choice


class DPTuner(BaseGraphTuner):
    """Exact layout selection (TVM's ``DPTuner``):
    ``DPTuner(graph, {input_name: shape}, records, target_ops, target)``, then
    ``benchmark_layout_transform()``, ``run()``, ``write_opt_sch2record_file(path)``."""

    def _solve(self, unary: list[np.ndarray], edges: list[Edge]) -> list[int]:
        return solve_dp(unary, edges)
