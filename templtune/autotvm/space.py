"""AutoTVM configuration spaces.

A template declares knobs on the config object it gets from :func:`templtune.autotvm.get_config`:

* during task creation that object is a :class:`ConfigSpace` (it *collects* every ``define_*``
  call; each knob reads as its first entity while the template body runs);
* during tuning and ``apply_history_best`` it is a :class:`ConfigEntity`, an immutable point of
  the space (``define_*`` calls only return placeholder axes; ``cfg[name]`` is the chosen entity);
* with no tuned config available it is a :class:`FallbackConfigEntity` (see ``fallback.py``).

Points are numbered in mixed radix, first knob least significant: index ``t`` picks entity
``t % len(knob0)`` of the first knob, then ``t //= len(knob0)`` and so on.

Deviations from TVM (see SPEC §9): ``get_rand_index`` raises instead of looping forever when no
index qualifies; ``define_*`` raises when a knob's space is empty (TVM fails later with an
``IndexError``); ``ConfigEntity``'s repr has one pinned format on every Python version.

This module builds and walks a space; the config object API and :class:`ConfigEntity` live in
``config_entity.py``, the index arithmetic and multi-filter validity in ``space_index.py``. Every
name stays importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

# NOTE: the names that moved out stay importable from here (TVM's path, pickles, users).
from templtune.autotvm.config_entity import ConfigEntity, _ConfigBase
from templtune.autotvm.config_entity import _num_outputs as _num_outputs
from templtune.autotvm.space_index import _IndexedSpace
from templtune.autotvm.task.knobs import (
    AnnotateEntity,
    AnnotateSpace,
    Axis,
    Entity,
    KnobSpace,
    OtherOptionEntity,
    OtherOptionSpace,
    ReorderEntity,
    ReorderSpace,
    SplitEntity,
    SplitSpace,
    VirtualAxis,
    _as_axes,
)
from templtune.autotvm.task.knobs import entity_from_json as entity_from_json
from templtune.errors import TempltuneError

__all__ = [
    "Axis", "VirtualAxis", "SplitSpace", "ReorderSpace", "AnnotateSpace", "OtherOptionSpace",
    "SplitEntity", "ReorderEntity", "AnnotateEntity", "OtherOptionEntity", "ConfigSpace",
    "ConfigEntity",
]

RngLike = np.random.Generator | int | None

_KNOB_CLASSES: dict[str, Callable[..., KnobSpace]] = {
    "split": SplitSpace, "reorder": ReorderSpace, "annotate": AnnotateSpace,
    "knob": OtherOptionSpace,
}


def _rng(rng: RngLike) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


class EmptyKnobError(TempltuneError, ValueError, IndexError):
    """A knob whose policy leaves no entity. TVM fails here with an ``IndexError`` (it takes
    entity 0 of the empty list), so this is one too."""


class ConfigSpace(_IndexedSpace):
    """The collected space of a template: ordered knobs plus optional multi-filters."""

    _collect = True

    # -- building
    def _define(self, kind: str, name: str, axes: Any, policy: str, **kwargs: Any) -> list[Axis]:
        if not self._collect:
            return super()._define(kind, name, axes, policy, **kwargs)
        space = _KNOB_CLASSES[kind](_as_axes(axes) if kind != "knob" else [], policy, **kwargs)
        if len(space) == 0:
            hint = ""
            if kind == "annotate" and "vec" in policy.split("_") and "try" not in policy:
                hint = ("; at most one axis may be vectorized, so policy 'vec' has no entity on "
                        f"{space.num_output} axes (use 'try_vec')")
            raise EmptyKnobError(f"knob {name!r} ({space!r}) has no valid entity{hint}")
        self.space_map[name] = space
        self._entity_map[name] = space[0]
        self._invalidate()
        return [Axis(space, i) for i in range(space.num_output)]

    def multi_filter(self, filter: Callable[[Mapping[str, Entity]], bool],
                     knobs: Sequence[str] | None = None) -> None:
        if self._collect:
            self._filters.append(filter)
            self._filter_knobs.append(None if knobs is None else tuple(knobs))
            self._invalidate()

    def get(self, index: int) -> ConfigEntity:
        """The configuration at ``index``; ``IndexError`` if out of range or filtered out."""
        index = int(index)
        self._check_range(index)
        if not self.is_index_valid(index):
            raise IndexError(f"index {index} is filtered out by multi_filter")
        return ConfigEntity(index, self.code_hash, self._entities_at(index), [])

    def point_of(self, config: Any) -> ConfigEntity | None:
        """This space's point with the knob values of ``config`` (a record's config, whose
        index may name another point: the space of an older template version or one filtered
        for another CPU), or None where a value is not a choice here or the point is filtered
        out."""
        if not isinstance(config, _ConfigBase):
            return None
        digits = []
        for name, knob in self.space_map.items():
            choices = list(knob.entities)
            if name not in config or config[name] not in choices:
                return None
            digits.append(choices.index(config[name]))
        index = self.knob2point(digits)
        return self.get(index) if self.is_index_valid(index) else None

    # -- walking the space (what tuners call)
    def get_next_index(self, index: int, n: int = 1, start: int | None = None,
                       end: int | None = None) -> int | None:
        """The ``n``-th valid index after ``index`` (before, for negative ``n``) within
        ``[start, end)``, or None when leaving the range."""
        start = 0 if start is None else start
        end = self.range_length if end is None else end
        if not self._filters:
            nxt = index + n
            return nxt if start <= nxt < end else None
        step = 1 if n >= 0 else -1
        remaining = abs(n)
        while remaining:
            index += step
            if not start <= index < end:
                return None
            if self.is_index_valid(index):
                remaining -= 1
        return index

    def get_rand_index(self, start: int | None = None, end: int | None = None,
                       to_exclude: Any = None, rng: RngLike = None) -> int:
        """A uniform random valid index in ``[start, end)`` that is not in ``to_exclude``.

        Rejection sampling as TVM; after many misses it enumerates the candidates instead, and
        raises ``ValueError`` if there are none (TVM loops forever).
        """
        gen = _rng(rng)
        start = 0 if start is None else start
        end = self.range_length if end is None else end
        excl = set() if to_exclude is None else set(int(x) for x in to_exclude)
        if end <= start:
            raise ValueError(f"empty index range [{start}, {end})")
        for _ in range(256):
            i = int(gen.integers(start, end))
            if i not in excl and self.is_index_valid(i):
                return i
        cands = [i for i in range(start, end) if i not in excl and self.is_index_valid(i)]
        if not cands:
            raise ValueError(f"no valid, unexcluded index in [{start}, {end})")
        return cands[int(gen.integers(len(cands)))]

    def sample_ints(self, m: int, rng: RngLike = None) -> np.ndarray:
        """``m`` distinct valid indices drawn uniformly at random."""
        total = len(self)
        if m > total:
            raise ValueError(f"cannot sample {m} distinct configs from a space of {total}")
        gen = _rng(rng)
        if self._filters and m * 2 > total:
            valid = np.flatnonzero(self._valid_all())
            return gen.choice(valid, size=m, replace=False).astype(np.int64)
        seen: dict[int, None] = {}
        while len(seen) < m:
            i = int(gen.integers(0, self.range_length))
            if i not in seen and self.is_index_valid(i):
                seen[i] = None
        return np.fromiter(seen, dtype=np.int64, count=m)

    def random_walk(self, point: int, rng: RngLike = None) -> int:
        """A valid index that differs from ``point`` in one randomly chosen knob."""
        gen = _rng(rng)
        dims = self.dims
        movable = [j for j, d in enumerate(dims) if d > 1]
        if not movable:
            raise ValueError("random_walk on a space with a single point")
        knobs = self.point2knob(point)
        for _ in range(10000):
            new = list(knobs)
            j = movable[int(gen.integers(len(movable)))]
            new[j] = int(gen.integers(dims[j]))
            p = self.knob2point(new)
            if p != point and self.is_index_valid(p):
                return p
        raise ValueError(f"random_walk found no valid neighbour of {point}")

    # -- printing
    def __repr__(self) -> str:
        # NOTE: TVM (v0.11 on) always prints range_length; the seed documents predate it.
        lines = [f"ConfigSpace (len={len(self)}, range_length={self.range_length}, space_map="]
        for i, (name, space) in enumerate(self.space_map.items()):
            lines.append(f"{i:4d} {name}: {space!r}")
        lines.append(")")
        return "\n".join(lines)


def __getattr__(name: str) -> Any:
    # NOTE: lazy, because fallback.py subclasses ConfigSpace from this module.
    if name == "FallbackConfigEntity":
        from templtune.autotvm.task.fallback import FallbackConfigEntity

        return FallbackConfigEntity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
