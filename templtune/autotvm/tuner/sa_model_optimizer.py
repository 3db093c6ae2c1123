"""Simulated annealing over config indices, guided by a cost model."""

from __future__ import annotations

import heapq
import logging
import time
from typing import Any

import numpy as np

from .index_based import space_is_valid
from .model_based_tuner import CostModel, ModelOptimizer

logger = logging.getLogger("autotvm")


class SimulatedAnnealingOptimizer(ModelOptimizer):
    """Parallel simulated-annealing chains that collect the top-scored unvisited configs.

    Parameters
    ----------
    task : Task
        The task whose ``config_space`` is searched.
    n_iter : int
        Maximum annealing steps per call.
    temp : float or (float, float)
        Constant temperature, or ``(start, end)`` decreased linearly over ``n_iter + 1`` steps.
    persistent : bool
        Start each call from the previous call's final points.
    parallel_size : int
        Number of chains (capped at the space size).
    early_stop : int or None
        Stop after this many steps without a new entry in the top list (None: never).
    log_interval : int
        Steps between debug log lines.
    seed : int, numpy.random.Generator or None
        Seed of the walks and acceptance draws.

    Notes
    -----
    A step moves every chain to a neighbour: one knob (chosen uniformly among knobs with more than
    one value) set to a different uniform value; neighbours that fail the space's filters are
    redrawn a few times, else the chain stays. A move is accepted with probability
    ``exp(min((s_new - s_old) / (t + 1e-5), 1))``.

    Deviation from AutoTVM (spec §9 item 4): AutoTVM drops maxima whose predicted score is
    negative, so plans can come back short. Here every real entry of the top list is returned
    (only unfilled slots are dropped); the scores are used only for ordering.
    """

    def __init__(self, task: Any, n_iter: int = 500, temp: float | tuple[float, float] = (1, 0),
                 persistent: bool = True, parallel_size: int = 128,
                 early_stop: int | None = 50, log_interval: int = 50,
                 seed: int | np.random.Generator | None = None) -> None:
        self.space = task.config_space
        self.dims = np.asarray([int(d) for d in self.space.dims], dtype=np.int64)
        self.strides = np.concatenate([[1], np.cumprod(self.dims)[:-1]]).astype(np.int64)
        self.n_iter = int(n_iter)
        self.temp = temp
        self.persistent = persistent
        self.parallel_size = min(int(parallel_size), len(self.space))
        self.early_stop = int(early_stop) if early_stop is not None else int(1e9)
        self.log_interval = max(1, int(log_interval))
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.points: np.ndarray | None = None
        # NOTE: without multi-filters every index is valid; skip the per-point checks.
        self.all_valid = len(self.space) == int(self.space.range_length)
        self.last_stats: dict[str, float] = {}

    # ------------------------------------------------------------------ moves
    def _valid(self, cand: np.ndarray) -> np.ndarray:
        if self.all_valid:
            return np.ones(len(cand), dtype=bool)
        return np.fromiter((space_is_valid(self.space, int(c)) for c in cand), dtype=bool,
                           count=len(cand))

    def sample(self, m: int) -> np.ndarray:
        """``m`` distinct valid indices, drawn uniformly (fewer if the space is smaller)."""
        n_range = int(self.space.range_length)
        m = min(m, len(self.space))
        out: dict[int, None] = {}
        tries = 0
        while len(out) < m and tries < 64 * m + 64:
            i = int(self.rng.integers(n_range))
            tries += 1
            if i not in out and space_is_valid(self.space, i):
                out[i] = None
        if len(out) < m:  # a tiny or heavily filtered space: enumerate
            rest = [i for i in range(n_range) if i not in out and space_is_valid(self.space, i)]
            self.rng.shuffle(rest)
            out.update(dict.fromkeys(rest[: m - len(out)]))
        return np.fromiter(out, dtype=np.int64, count=len(out))

    def random_walk(self, points: np.ndarray) -> np.ndarray:
        """One neighbour per point (see the class notes)."""
        movable = np.flatnonzero(self.dims > 1)
        if len(movable) == 0:
            return points.copy()
        new = points.copy()
        todo = np.arange(len(points))
        for _ in range(8):
            if len(todo) == 0:
                break
            d = movable[self.rng.integers(len(movable), size=len(todo))]
            cur = (points[todo] // self.strides[d]) % self.dims[d]
            val = (cur + 1 + self.rng.integers(0, self.dims[d] - 1)) % self.dims[d]
            cand = points[todo] + (val - cur) * self.strides[d]
            ok = self._valid(cand)
            new[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return new

    # ------------------------------------------------------------------ search
    def find_maximums(self, model: CostModel, num: int, exclusive: set[int]) -> list[int]:
        tic = time.perf_counter()
        points = self.points if (self.persistent and self.points is not None) else None
        if points is None or len(points) == 0:
            points = self.sample(self.parallel_size)
        scores = np.asarray(model.predict(points), dtype=np.float64)

        # top-`num` min-heap of (score, index); `in_heap` keeps indices unique and excluded
        heap: list[tuple[float, int]] = [(-np.inf, -1 - i) for i in range(num)]
        in_heap = set(exclusive) | {h[1] for h in heap}

        def offer(ps: np.ndarray, ss: np.ndarray) -> bool:
            changed = False
            for p, s in zip(ps.tolist(), ss.tolist()):
                if s > heap[0][0] and p not in in_heap:
                    _, old = heapq.heapreplace(heap, (s, p))
                    in_heap.discard(old)
                    in_heap.add(p)
                    changed = True
            return changed

        if num > 0:
            offer(points, scores)
        if isinstance(self.temp, (tuple, list)):
            t, t_end = float(self.temp[0]), float(self.temp[1])
            cool = (t - t_end) / (self.n_iter + 1)
        else:
            t, cool = float(self.temp), 0.0
        k = last_improve = 0
        while k < self.n_iter and k < last_improve + self.early_stop and num > 0:
            new_points = self.random_walk(points)
            new_scores = np.asarray(model.predict(new_points), dtype=np.float64)
            prob = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1.0))
            accept = self.rng.random(len(prob)) < prob
            points = np.where(accept, new_points, points)
            scores = np.where(accept, new_scores, scores)
            if offer(new_points, new_scores):
                last_improve = k
            k += 1
            t -= cool
            if k % self.log_interval == 0:
                logger.debug("SA iter %d\tlast_update %d\tmax-0 %.2f\ttemp %.2f\telapsed %.2f s",
                             k, last_improve, max(s for s, _ in heap), t,
                             time.perf_counter() - tic)
        result = sorted((h for h in heap if h[1] >= 0 and np.isfinite(h[0])), reverse=True)
        if self.persistent:
            self.points = points
        self.last_stats = {"iterations": float(k), "seconds": time.perf_counter() - tic}
        logger.debug("SA finished: %d iterations, %d maxima, %.2f s", k, len(result),
                     self.last_stats["seconds"])
        return [p for _, p in result]
