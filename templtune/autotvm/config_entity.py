"""The config object a template body calls (:class:`_ConfigBase`) and one point of a space
(:class:`ConfigEntity`).

Separate from :mod:`templtune.autotvm.space` because a :class:`ConfigEntity` stands alone: it is
what records decode into and what crosses process boundaries, without the space's indexing
machinery. Import both names from ``templtune.autotvm.space`` (TVM's path); they live here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from templtune.autotvm.task.knobs import (
    Axis,
    Entity,
    OtherOptionEntity,
    VirtualAxis,
    entity_from_json,
)

__all__ = ["ConfigEntity"]


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

