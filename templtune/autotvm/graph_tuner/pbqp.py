"""``PBQPTuner``: partitioned boolean quadratic programming by graph reductions.

The classic heuristic solver: a node without neighbours is decided alone (R0); a node with
one neighbour folds its best response into the neighbour's costs (RI); a node with two folds
it into the edge between them (RII), all three exact; otherwise the node of highest degree
takes its locally best choice (RN) and the rest is reduced again. Choices are read back in
reverse order.
"""

from __future__ import annotations

import numpy as np

from .base import BaseGraphTuner, Edge

__all__ = ["PBQPTuner", "solve_pbqp"]


def solve_pbqp(unary: list[np.ndarray], edges: list[Edge]) -> list[int]:
    """A choice per node by PBQP reductions (exact on graphs the reductions empty)."""
    cost = {k: u.astype(float).copy() for k, u in enumerate(unary)}
    mat: dict[tuple[int, int], np.ndarray] = {}

    def add_edge(u: int, v: int, m: np.ndarray) -> None:
        if u > v:
            u, v, m = v, u, m.T
        mat[(u, v)] = mat[(u, v)] + m if (u, v) in mat else m.astype(float).copy()

    def edge(u: int, v: int) -> np.ndarray:
        return mat[(u, v)] if u < v else mat[(v, u)].T

    for e in edges:
        if e.u != e.v:
            add_edge(e.u, e.v, e.cost)
    adj: dict[int, set[int]] = {k: set() for k in cost}
    for u, v in mat:
        adj[u].add(v)
        adj[v].add(u)
    stack: list[tuple[int, str, tuple[int, ...], np.ndarray]] = []

    def remove(v: int) -> None:
        for u in adj.pop(v):
            adj[u].discard(v)
            mat.pop((min(u, v), max(u, v)), None)

    while adj:
        low = next((n for n in adj if len(adj[n]) <= 2), None)
        v = low if low is not None else max(adj, key=lambda n: (len(adj[n]), -n))
        if low is None:
            local = cost[v] + sum(np.min(edge(v, u) + cost[u][None, :], axis=1)
                                  for u in adj[v])
            pick = int(np.argmin(local))
            for u in adj[v]:
                cost[u] = cost[u] + edge(v, u)[pick]
            stack.append((v, "fixed", (), np.array(pick)))
        elif not adj[v]:
            stack.append((v, "fixed", (), np.array(int(np.argmin(cost[v])))))
        elif len(adj[v]) == 1:
            (u,) = adj[v]
            t = edge(u, v) + cost[v][None, :]
            cost[u] = cost[u] + t.min(axis=1)
            stack.append((v, "one", (u,), t.argmin(axis=1)))
        else:
            u, w = sorted(adj[v])
            t = edge(u, v)[:, :, None] + cost[v][None, :, None] + edge(v, w)[None, :, :]
            stack.append((v, "two", (u, w), t.argmin(axis=1)))
            remove(v)
            add_edge(u, w, t.min(axis=1))
            adj[u].add(w)
            adj[w].add(u)
            continue
        remove(v)
    choice = [0] * len(unary)
    for v, _, deps, table in reversed(stack):
        choice[v] = int(table[tuple(choice[d] for d in deps)]) if deps else int(table)
    return choice


class PBQPTuner(BaseGraphTuner):
    """Heuristic layout selection for any graph (TVM's ``PBQPTuner``), same API as
    :class:`~.dp.DPTuner`."""

    def _solve(self, unary: list[np.ndarray], edges: list[Edge]) -> list[int]:
        return solve_pbqp(unary, edges)
