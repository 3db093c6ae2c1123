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
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

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
    entity_from_json,
)
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


class _ConfigBase:
    """What a template body can call on any config object."""

    _collect: bool
    is_fallback: bool = False

    def __init__(self) -> None:
        self._entity_map: dict[str, Entity] = {}
        self.errors: list[str] = []
        self.code_hash: str | None = None
        self.flop: float = 0.0
        self.cost: float | None = None

    # -- reading knobs
    def __getitem__(self, name: str) -> Any:
        try:
            return self._entity_map[name]
        except KeyError:
            known = ", ".join(self._entity_map) or "none"
            raise KeyError(f"config has no knob {name!r} (knobs: {known})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entity_map)

    def __contains__(self, name: object) -> bool:
        return name in self._entity_map

    # -- axes
    @staticmethod
    def axis(var: Any) -> VirtualAxis:
        """Wrap an int or a loop variable as a config-space axis."""
        return VirtualAxis(var)

    reduce_axis = axis

    # -- knob definitions
    def define_split(self, name: str, axis: Any, policy: str = "factors",
                     **kwargs: Any) -> list[Axis]:
        """Define a split knob of ``axis`` into ``num_outputs`` loops.

        Parameters
        ----------
        name : str
            Knob name.
        axis : int, IterVar or VirtualAxis
            The axis to split; its length must be a known constant.
        policy : {"factors", "power2", "verbose", "candidate"}
            ``factors``: divisors only (no tail); ``power2``: powers of two (tails allowed);
            ``verbose``: the sorted union of both (TVM uses set order); ``candidate``: the size
            lists given as ``candidate=[[...], ...]``.
        num_outputs : int
            Number of loops after the split (required).
        max_factor : int, optional
            Largest inner factor (default ``2**31``).
        filter : callable, optional
            Predicate on :class:`SplitEntity`; entities failing it are dropped.
        no_tail : bool, optional
            Keep only exact splits (default ``policy == "factors"``).
        """
        return self._define("split", name, [axis], policy, **kwargs)

    def define_reorder(self, name: str, axes: Sequence[Any], policy: str,
                       **kwargs: Any) -> list[Axis]:
        """Define a reorder knob (policies ``identity``, ``all``, ``interval_all``,
        ``candidate``, ``interleave``, ``interleave_cuda``)."""
        return self._define("reorder", name, axes, policy, **kwargs)

    def define_annotate(self, name: str, axes: Sequence[Any], policy: str,
                        **kwargs: Any) -> list[Axis]:
        """Define an annotation knob (``try_unroll``, ``try_vec``, ``try_unroll_vec``,
        ``bind_gpu``, ``bind_gpu_virtual``, ``locate_cache``, ...)."""
        return self._define("annotate", name, axes, policy, **kwargs)

    def define_knob(self, name: str, candidate: Sequence[Any]) -> list[Axis]:
        """Define a knob choosing one value of ``candidate``; read it as ``cfg[name].val``."""
        return self._define("knob", name, [], "", candidate=list(candidate))

    def _define(self, kind: str, name: str, axes: Any, policy: str, **kwargs: Any) -> list[Axis]:
        n_out = _num_outputs(kind, axes, kwargs)
        return [Axis(None, i) for i in range(n_out)]

    def multi_filter(self, filter: Callable[[Mapping[str, Entity]], bool],
                     knobs: Sequence[str] | None = None) -> None:
        """Keep only the points for which ``filter(name -> entity map)`` is true.

        ``knobs``: the knobs ``filter`` reads, when known. Counting a space whose filters all
        name them evaluates each filter once per combination of its knobs only (not once per
        point), so large spaces stay cheap to size. A filter with a ``table(*knob_spaces)``
        method answers all those combinations at once: a boolean array shaped like the
        knobs' entity counts, equal to calling it on each combination.
        """

    # -- bookkeeping
    def add_flop(self, flop: Any) -> None:
        """Add to the FLOP count of this configuration (use when the counter cannot)."""
        v = getattr(flop, "value", flop)
        self.flop += float(v)

    def raise_error(self, msg: str) -> None:
        """Mark this configuration invalid; the builder reports ``INSTANTIATION_ERROR``."""
        self.errors.append(str(msg))

    def valid(self) -> bool:
        """True while no error has been raised."""
        return not self.errors


def _num_outputs(kind: str, axes: Any, kwargs: Mapping[str, Any]) -> int:
    if kind == "split":
        return int(kwargs["num_outputs"])
    if kind == "knob":
        return 0
    if kind == "annotate" and kwargs.get("num_anchor") is not None:
        return int(kwargs["num_anchor"])
    return len(axes) if isinstance(axes, (list, tuple)) else 1


class ConfigSpace(_ConfigBase):
    """The collected space of a template: ordered knobs plus optional multi-filters."""

    _collect = True

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

    def subrange_length(self, start: int, end: int) -> int:
        """Number of valid indices in ``[start, end)``."""
        if not 0 <= start <= end <= self.range_length:
            raise IndexError(f"bad subrange [{start}, {end}) of [0, {self.range_length})")
        if not self._filters:
            return end - start
        return int(np.count_nonzero(self._valid_all()[start:end]))

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


class ConfigEntity(_ConfigBase):
    """One point of a config space: a fixed knob → entity map plus its ``index``.

    The choice of entities is immutable; ``flop``, ``cost`` and ``errors`` are per-use scratch
    state written by the template and the measurement code.
    """

    _collect = False

    def __init__(self, index: int, code_hash: str | None, entity_map: Mapping[str, Entity],
                 constraints: Sequence[Any] = ()) -> None:
        super().__init__()
        self._index = int(index)
        self.code_hash = code_hash
        self._entity_map = dict(entity_map)
        self._constraints = list(constraints)

    @property
    def index(self) -> int:
        return self._index

    def get_flatten_feature(self) -> np.ndarray:
        """Numeric features, knob by knob: split sizes (with the leading -1), reorder perms,
        11-wide one-hots per annotated axis, knob values."""
        feats: list[float] = []
        for ent in self._entity_map.values():
            feats.extend(ent.feature())
        return np.array(feats, dtype=np.float32)

    def get_other_option(self) -> dict[str, Any]:
        """``{name: value}`` of the ``define_knob`` knobs."""
        return {k: v.val for k, v in self._entity_map.items() if isinstance(v, OtherOptionEntity)}

    def to_json_dict(self) -> dict[str, Any]:
        """``{"index", "code_hash", "entity": [[name, kind, value], ...]}`` (AutoTVM format)."""
        return {
            "index": self._index,
            "code_hash": self.code_hash,
            "entity": [[k, v.kind, v.to_json()] for k, v in self._entity_map.items()],
        }

    @staticmethod
    def from_json_dict(json_dict: Mapping[str, Any]) -> ConfigEntity:
        """Rebuild a config from :meth:`to_json_dict` output; unknown kinds raise."""
        ents = {}
        for item in json_dict["entity"]:
            name, kind, value = item
            ents[str(name)] = entity_from_json(kind, value)
        return ConfigEntity(int(json_dict["index"]), json_dict.get("code_hash"), ents, [])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigEntity):
            return NotImplemented
        return (self._index == other._index and self.code_hash == other.code_hash
                and self._entity_map == other._entity_map)

    def __hash__(self) -> int:
        return hash((self._index, self.code_hash, tuple(self._entity_map)))

    def __repr__(self) -> str:
        # NOTE: pinned to the pre-3.12 OrderedDict-derived format of TVM on every Python.
        items = ", ".join(f"({k!r}, {v!r})" for k, v in self._entity_map.items())
        return f"[{items}],{self.code_hash},{self._index}"


def __getattr__(name: str) -> Any:
    # NOTE: lazy, because fallback.py subclasses ConfigSpace from this module.
    if name == "FallbackConfigEntity":
        from templtune.autotvm.task.fallback import FallbackConfigEntity

        return FallbackConfigEntity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
