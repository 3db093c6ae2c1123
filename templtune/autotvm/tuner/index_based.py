"""Index-based tuners: grid search and random search over config indices.

Both walk a (possibly multi-filtered) index range, propose only valid indices, and never propose an
index twice (including indices marked visited by resume / ``load_history``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register_tuner
from .tuner import Tuner


def space_is_valid(space: Any, index: int) -> bool:
    """Whether ``index`` passes the space's filters (True if the space has no filter API)."""
    check = getattr(space, "is_index_valid", None)
    return True if check is None else bool(check(index))


def count_valid(space: Any, begin: int, end: int) -> int:
    """Number of valid indices in ``[begin, end)``."""
    if begin == 0 and end == space.range_length:
        return len(space)
    sub = getattr(space, "subrange_length", None)
    if sub is not None:
        return int(sub(begin, end))
    return sum(1 for i in range(begin, end) if space_is_valid(space, i))


class RandomIndexSampler:
    """Draws distinct valid indices of ``[begin, end)`` not in an exclusion set, seeded.

    Rejection sampling while the range is mostly unexplored; once rejections become frequent it
    switches to an explicit shuffled list of the remaining indices, so drawing always terminates
    (unlike AutoTVM's ``get_rand_index``, which loops forever when nothing qualifies).
    """

    def __init__(self, space: Any, begin: int, end: int, rng: np.random.Generator) -> None:
        self.space, self.begin, self.end, self.rng = space, begin, end, rng
        self._pool: list[int] | None = None

    def draw(self, excluded: set[int]) -> int | None:
        """One index not in ``excluded`` (the caller adds it there), or None when exhausted."""
        if self._pool is None:
            # NOTE: on a large range, rejection sampling stays cheap even when most indices are
            # filtered out; enumeration (O(range)) is the last resort once nearly all are taken.
            tries = 64 if self.end - self.begin <= 100_000 else 20_000
            for _ in range(tries):
                i = int(self.rng.integers(self.begin, self.end))
                if i not in excluded and space_is_valid(self.space, i):
                    return i
            pool = [i for i in range(self.begin, self.end)
                    if i not in excluded and space_is_valid(self.space, i)]
            self.rng.shuffle(pool)
            self._pool = pool
        while self._pool:
            i = self._pool.pop()
            if i not in excluded:
                return i
        return None


class IndexBaseTuner(Tuner):
    """Base of tuners that walk config indices in ``range_idx``.

    Parameters
    ----------
    task : Task
        The task to tune.
    range_idx : (int, int) or None
        **Inclusive** ``(begin, end)`` index range; default the whole space.
    seed : int or None
        RNG seed.
    """

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None,
                 seed: int | np.random.Generator | None = None, **kwargs: Any) -> None:
        super().__init__(task, seed=seed, **kwargs)
        space = self.space
        if range_idx is None:
            range_idx = (0, space.range_length - 1)
        begin, end = int(range_idx[0]), int(range_idx[1]) + 1
        if begin < 0 or end > space.range_length or end - begin <= 0:
            raise ValueError(f"invalid range_idx {range_idx!r} for a space of range "
                             f"{space.range_length}")
        self.begin_idx, self.end_idx = begin, end
        self.range_length = end - begin
        self._visited_max: int | None = None
        self._exhausted = False
        self._n_in_range = 0

    @property
    def visited_max(self) -> int:
        """Number of valid indices in the range (computed on first use: with a multi-filter this
        evaluates the filter over the whole range)."""
        if self._visited_max is None:
            self._visited_max = count_valid(self.space, self.begin_idx, self.end_idx)
        return self._visited_max

    def _in_range(self, i: int) -> bool:
        return self.begin_idx <= i < self.end_idx

    def mark_visited(self, indices) -> None:
        for i in indices:
            i = int(i)
            if i not in self.visited:
                self.visited.add(i)
                if self._in_range(i) and space_is_valid(self.space, i):
                    self._n_in_range += 1

    def has_next(self) -> bool:
        # NOTE: exhaustion is detected by the walk itself, so a multi-filtered space need not be
        # counted up front (``visited_max`` stays lazy).
        if self._exhausted or self._n_in_range >= self.range_length:
            return False
        return self._visited_max is None or self._n_in_range < self._visited_max

    def next_batch(self, batch_size: int) -> list:
        out: list[Any] = []
        while len(out) < batch_size and self.has_next():
            i = self._next_index()
            if i is None:
                self._exhausted = True
                break
            self.mark_visited([i])
            out.append(self.space.get(i))
        return out

    def _next_index(self) -> int | None:
        raise NotImplementedError


@register_tuner("gridsearch", "every valid config in index order")
class GridSearchTuner(IndexBaseTuner):
    """Enumerate valid indices of ``range_idx`` in ascending order (skipping visited ones).

    Parameters
    ----------
    task : Task
        The task to tune.
    range_idx : (int, int) or None
        Inclusive index range (default: whole space).
    """

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None, **kwargs: Any) -> None:
        super().__init__(task, range_idx=range_idx, **kwargs)
        self.index = self.begin_idx
        while (self.index < self.end_idx - 1
               and not space_is_valid(self.space, self.index)):
            self.index += 1
        self.counter = self.index  # NOTE: AutoTVM name kept for scripts that read it

    def _next_index(self) -> int | None:
        while self.index < self.end_idx:
            i = self.index
            self.index += 1
            if i not in self.visited and space_is_valid(self.space, i):
                return i
        return None


@register_tuner("random", "uniformly random valid configs, never repeated")
class RandomTuner(IndexBaseTuner):
    """Uniformly random valid, unvisited indices of ``range_idx``; seeded, never repeats.

    Parameters
    ----------
    task : Task
        The task to tune.
    range_idx : (int, int) or None
        Inclusive index range (default: whole space).
    seed : int or None
        RNG seed (same seed, same sequence).
    """

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None, **kwargs: Any) -> None:
        super().__init__(task, range_idx=range_idx, **kwargs)
        self._sampler = RandomIndexSampler(self.space, self.begin_idx, self.end_idx, self.rng)

    def _next_index(self) -> int | None:
        return self._sampler.draw(self.visited)
