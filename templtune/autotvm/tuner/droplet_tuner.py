"""DropletTuner: a deterministic local search over knob vectors (TVM's ``DropletTuner``).

The search keeps a *center* (the best config so far) and measures its neighbours: the configs
that differ from it in one knob by ``radius`` positions, in either direction. When a neighbour is
faster, and (with repeated timings) significantly so by a one-sided Welch t-test at ``pvalue``,
the center moves there and the radius goes back to 1; when none is, the radius grows, so the
search looks further out before it gives up. It ends when the radius exceeds the largest knob.
It needs no cost model and few trials on spaces whose cost is smooth in the knob indices, but it
is a local method: unlike grid or random search it does not cover the whole space.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..measure import MeasureInput, MeasureResult
from .index_based import RandomIndexSampler, space_is_valid
from .registry import register_tuner
from .tuner import Tuner


def significantly_faster(new: Sequence[float], old: Sequence[float], pvalue: float) -> bool:
    """Whether timings ``new`` are faster than ``old``: lower mean and, when both have two or
    more timings, a one-sided Welch t-test below ``pvalue``."""
    if not new or not old or np.mean(new) >= np.mean(old):
        return False
    if len(new) < 2 or len(old) < 2 or pvalue >= 1:
        return True
    a, b = np.asarray(new, float), np.asarray(old, float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return True  # identical repeats: the lower mean is certain
    t = (a.mean() - b.mean()) / np.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    from scipy.stats import t as student_t  # NOTE: imported only when repeats are compared

    return bool(student_t.cdf(t, dof) < pvalue)


@register_tuner("droplet", "local search around the best config with a growing radius",
                exhaustive=False)
class DropletTuner(Tuner):
    """Tuner moving a droplet of neighbour measurements towards faster configs.

    Parameters
    ----------
    task : Task
        The task to tune.
    start_position : sequence of int, optional
        Knob-index vector of the first center (default: all zeros; a random valid config when
        that one is filtered out).
    pvalue : float
        Significance level for accepting a faster neighbour (repeated timings only).
    seed : int or None
        RNG seed (used only to pick a valid start when ``start_position`` is invalid).
    """

    def __init__(self, task: Any, start_position: Sequence[int] | None = None,
                 pvalue: float = 0.05, seed: int | np.random.Generator | None = None,
                 **kwargs: Any) -> None:
        super().__init__(task, seed=seed, **kwargs)
        self.dims = [int(d) for d in self.space.dims]
        self.pvalue = float(pvalue)
        start = list(start_position) if start_position is not None else [0] * len(self.dims)
        if len(start) != len(self.dims) or any(not 0 <= k < d for k, d in zip(start, self.dims)):
            raise ValueError(f"start_position {start!r} is not a knob vector of dims {self.dims}")
        center = int(self.space.knob2point(start))
        if not space_is_valid(self.space, center):
            sampler = RandomIndexSampler(self.space, 0, self.space.range_length, self.rng)
            drawn = sampler.draw(set())
            if drawn is None:
                raise ValueError("the config space has no valid config")
            center = drawn
        self.center = center
        self.center_costs: tuple[float, ...] = ()
        self.radius = 0  # radius 0 measures the center itself
        self.max_radius = max(self.dims, default=1)
        self._queue: list[int] = []
        self._pending = 0
        self._moved = False

    def _neighbours(self) -> list[int]:
        knobs = list(self.space.point2knob(self.center))
        out: list[int] = []
        for d, size in enumerate(self.dims):
            for step in (self.radius, -self.radius):
                k = knobs[d] + step
                if step and 0 <= k < size:
                    cand = int(self.space.knob2point([*knobs[:d], k, *knobs[d + 1:]]))
                    if cand not in self.visited and space_is_valid(self.space, cand):
                        out.append(cand)
        return out

    def _refill(self) -> None:
        while not self._queue and self.radius <= self.max_radius:
            if self.radius == 0:
                self._queue = [] if self.center in self.visited else [self.center]
            else:
                self._queue = self._neighbours()
            if not self._queue:
                self.radius += 1

    def has_next(self) -> bool:
        if self._pending:
            return True
        self._refill()
        return bool(self._queue)

    def next_batch(self, batch_size: int) -> list:
        if not self._queue and not self._pending:
            self._refill()
        batch = self._queue[:batch_size]
        self._queue = self._queue[batch_size:]
        self.visited.update(batch)
        self._pending += len(batch)
        return [self.space.get(i) for i in batch]

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for inp, res in zip(inputs, results):
            self._pending = max(0, self._pending - 1)
            if not res.ok:
                continue
            idx = int(inp.config.index)
            costs = tuple(float(c) for c in res.costs)
            if idx == self.center and not self.center_costs:
                self.center_costs = costs
            elif not self.center_costs or significantly_faster(costs, self.center_costs,
                                                                self.pvalue):
                self.center, self.center_costs, self._moved = idx, costs, True
        if not self._queue and not self._pending:
            # a ring is done: recentre with radius 1 after a move, else look further out
            self.radius = 1 if self._moved else self.radius + 1
            self._moved = False
