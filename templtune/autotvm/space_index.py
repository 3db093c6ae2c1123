"""Size, mixed-radix index mapping and multi-filter validity of a config space.

:class:`_IndexedSpace` is the base of :class:`~templtune.autotvm.space.ConfigSpace`: it owns the
knob table, the filters and the lazily filled validity cache, and answers "how many points" and
"is point ``i`` valid". Kept apart from ``space.py``, which holds what builds a space (the
``define_*`` calls) and what walks it (the samplers tuners call).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from templtune.autotvm.config_entity import _ConfigBase
from templtune.autotvm.task.knobs import Entity, KnobSpace


class _IndexedSpace(_ConfigBase):
    """The knob table of a space and the index arithmetic over it (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.space_map: dict[str, KnobSpace] = {}
        self._filters: list[Callable[[Mapping[str, Entity]], bool]] = []
        #: per filter, the knobs it reads (None: unknown, evaluated point by point)
        self._filter_knobs: list[tuple[str, ...] | None] = []
        # NOTE: validity under the multi-filters, per index: -1 unknown, 0 invalid, 1 valid.
        # Filled lazily (one index at a time, or all at once when a count is needed).
        self._valid: np.ndarray | None = None
        self._n_valid: int | None = None

    def _invalidate(self) -> None:
        self._valid, self._n_valid = None, None

    def __getstate__(self) -> dict[str, Any]:
        # NOTE: the validity cache can be range_length bytes; workers recompute what they need.
        state = dict(self.__dict__)
        state["_valid"], state["_n_valid"] = None, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- size and index mapping
    @property
    def dims(self) -> list[int]:
        """Number of entities of each knob, in definition order."""
        return [len(s) for s in self.space_map.values()]

    @property
    def range_length(self) -> int:
        """Size of the full product space (ignoring multi-filters)."""
        return math.prod(self.dims)

    def __len__(self) -> int:
        if not self._filters:
            return self.range_length
        if self._n_valid is None:
            self._n_valid = int(np.count_nonzero(self._valid_all()))
        return self._n_valid

    def point2knob(self, point: int) -> list[int]:
        """Mixed-radix digits of ``point`` (first knob least significant)."""
        out = []
        for d in self.dims:
            out.append(int(point % d))
            point //= d
        return out

    def knob2point(self, knob: Sequence[int]) -> int:
        """Inverse of :meth:`point2knob`."""
        point, base = 0, 1
        for k, d in zip(knob, self.dims):
            point += int(k) * base
            base *= d
        return point

    def _entities_at(self, index: int) -> dict[str, Entity]:
        out = {}
        for name, space in self.space_map.items():
            out[name] = space[index % len(space)]
            index //= len(space)
        return out

    def _check_range(self, index: int) -> None:
        if not 0 <= index < self.range_length:
            raise IndexError(f"index {index} out of range [0, {self.range_length})")

    def _cache(self) -> np.ndarray:
        if self._valid is None:
            self._valid = np.full(self.range_length, -1, dtype=np.int8)
        return self._valid

    def _valid_all(self) -> np.ndarray:
        cache = self._cache()
        knob_lists = getattr(self, "_filter_knobs", [])
        if (len(knob_lists) == len(self._filters) and all(k is not None for k in knob_lists)
                and bool(np.any(cache < 0))):
            cache[:] = self._valid_by_knobs(knob_lists)  # type: ignore[arg-type]
        for i in np.flatnonzero(cache < 0):
            cache[i] = self._compute_valid(int(i))
        return cache.astype(bool)

    def _valid_by_knobs(self, knob_lists: Sequence[tuple[str, ...]]) -> np.ndarray:
        """Validity of every point: each filter over the product of its own knobs, broadcast
        over the others (the index is mixed-radix, first knob least significant, i.e. a
        C-order array whose axes are the knobs in reverse)."""
        names = list(self.space_map)
        n = len(names)
        valid = np.ones(self.dims[::-1], dtype=bool)
        for filt, knobs in zip(self._filters, knob_lists):
            spaces = [self.space_map[k] for k in knobs]
            table = getattr(filt, "table", None)
            if table is not None:
                sub = np.asarray(table(*spaces), dtype=bool)
            else:
                entities = ([s[i] for i in range(len(s))] for s in spaces)
                sub = np.fromiter((bool(filt(dict(zip(knobs, ents))))
                                   for ents in itertools.product(*entities)),
                                  dtype=bool, count=math.prod(len(s) for s in spaces))
            sub = sub.reshape([len(s) for s in spaces])
            axes = [n - 1 - names.index(k) for k in knobs]
            order = sorted(range(len(knobs)), key=lambda i: axes[i])
            shape = [1] * n
            for i in order:
                shape[axes[i]] = len(spaces[i])
            valid &= sub.transpose(order).reshape(shape)
        return valid.reshape(-1).astype(np.int8)

    def _compute_valid(self, index: int) -> bool:
        ents = self._entities_at(index)
        return all(f(ents) for f in self._filters)

    def is_index_valid(self, index: int) -> bool:
        """Whether ``index`` passes every multi-filter (``0 <= index < range_length``)."""
        self._check_range(index)
        if not self._filters:
            return True
        cache = self._cache()
        if cache[index] < 0:
            cache[index] = self._compute_valid(index)
        return bool(cache[index])

    def subrange_length(self, start: int, end: int) -> int:
        """Number of valid indices in ``[start, end)``."""
        if not 0 <= start <= end <= self.range_length:
            raise IndexError(f"bad subrange [{start}, {end}) of [0, {self.range_length})")
        if not self._filters:
            return end - start
        return int(np.count_nonzero(self._valid_all()[start:end]))
