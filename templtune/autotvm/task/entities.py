"""Knob entities: one point of a knob sub-space.

Each entity class owns its JSON encoding (a two-letter ``kind`` code and a JSON value, as in
AutoTVM logs), its numeric features and how it applies itself to a schedule. Entities are frozen,
slotted dataclasses that compare by value.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

# One-hot positions of annotation tokens in the flattened feature vector (AutoTVM's table).
ANNOTATE_TABLE: dict[str, int] = {
    "none": 0, "vec": 1, "unroll": 2, "blockIdx.x": 3, "blockIdx.y": 4, "blockIdx.z": 5,
    "threadIdx.x": 6, "threadIdx.y": 7, "threadIdx.z": 8, "vthread": 9, "fuse": 10,
}


class Entity:
    """Base class of knob entities. ``kind`` is the JSON kind code (``sp``, ``re``, ``an``,
    ``ot``); :data:`ENTITY_KINDS` maps codes to classes."""

    __slots__ = ()
    kind: ClassVar[str] = ""

    def to_json(self) -> Any:
        raise NotImplementedError

    @classmethod
    def from_json(cls, value: Any) -> Entity:
        raise NotImplementedError

    def feature(self) -> list[float]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True, repr=False)
class SplitEntity(Entity):
    """Split factors, outermost first. ``size[0]`` is usually -1 ("whatever is left")."""

    size: tuple[int, ...]
    kind: ClassVar[str] = "sp"

    def __init__(self, size: Sequence[int]) -> None:
        object.__setattr__(self, "size", tuple(int(x) for x in size))

    def apply(self, sch: Any, op: Any, axis: Any) -> list[Any]:
        """Split ``axis`` of stage ``sch[op]`` into ``len(size)`` loops; returns them outer first.

        Position ``i`` (from 1) splits off with ``factor = prod(size[i:])``; ``size[0]`` is not
        read, so ``[-1, 2, 4, 8]`` on 512 gives extents 8, 2, 4, 8.
        """
        ret = []
        for i in range(1, len(self.size)):
            outer, axis = sch[op].split(axis, factor=math.prod(self.size[i:]))
            ret.append(outer)
        return ret + [axis]

    def to_json(self) -> list[int]:
        return list(self.size)

    @classmethod
    def from_json(cls, value: Any) -> SplitEntity:
        return cls(value)

    def feature(self) -> list[float]:
        return [float(x) for x in self.size]

    def __repr__(self) -> str:
        return str(list(self.size))


@dataclass(frozen=True, slots=True, repr=False)
class ReorderEntity(Entity):
    """A permutation of the knob's axes."""

    perm: tuple[int, ...]
    kind: ClassVar[str] = "re"

    def __init__(self, perm: Sequence[int]) -> None:
        object.__setattr__(self, "perm", tuple(int(x) for x in perm))

    def apply(self, sch: Any, op: Any, axes: Sequence[Any]) -> list[Any]:
        """Reorder ``axes`` of ``sch[op]`` by the permutation and return the new order.

        With fewer axes than the permutation has entries, out-of-range entries are dropped.
        """
        if len(axes) == len(self.perm):
            new_order = [axes[i] for i in self.perm]
        else:
            new_order = [axes[i] for i in self.perm if i < len(axes)]
        sch[op].reorder(*new_order)
        return new_order

    def to_json(self) -> list[int]:
        return list(self.perm)

    @classmethod
    def from_json(cls, value: Any) -> ReorderEntity:
        return cls(value)

    def feature(self) -> list[float]:
        return [float(x) for x in self.perm]

    def __repr__(self) -> str:
        return str(list(self.perm))


@dataclass(frozen=True, slots=True, repr=False)
class AnnotateEntity(Entity):
    """One annotation per axis (``none``, ``unroll``, ``vec``, ``fuse``, a thread tag), or for
    ``locate_cache`` a tuple of anchor positions."""

    anns: tuple[Any, ...]
    kind: ClassVar[str] = "an"

    def __init__(self, anns: Sequence[Any]) -> None:
        object.__setattr__(self, "anns", tuple(anns))

    def apply(self, sch: Any, op: Any, axes: Sequence[Any], axis_lens: Sequence[int] | None = None,
              max_unroll: int | None = None, vec_size: Sequence[int] | None = None,
              cfg: Any = None, source: Sequence[Sequence[Any]] | None = None) -> list[Any]:
        """Apply the annotations to ``axes`` of ``sch[op]``; returns the (possibly fused) axes.

        With ``source`` (``locate_cache``), each tensor of ``source[j]`` is ``compute_at``'d at
        ``axes[anns[j]]``. Otherwise ``unroll``/``vec`` report to ``cfg.raise_error`` when
        ``axis_lens[i]`` exceeds ``max_unroll`` / is not in ``vec_size`` (and annotate anyway),
        thread tags bind, and ``fuse`` fuses axis ``i`` into axis ``i + 1`` in place.
        """
        if source is not None:
            for tensors, anchor in zip(source, self.anns):
                for t in tensors:
                    sch[t].compute_at(sch[op], axes[anchor])
            return list(axes)
        axes = list(axes)
        for i, ann in enumerate(self.anns):
            if ann == "none":
                continue
            if ann == "unroll":
                if max_unroll is not None and axis_lens is not None and axis_lens[i] > max_unroll:
                    if cfg is not None:
                        cfg.raise_error(f"too large factor for unrolling: {axis_lens[i]}")
                sch[op].unroll(axes[i])
            elif ann == "vec":
                if vec_size is not None and axis_lens is not None and axis_lens[i] not in vec_size:
                    if cfg is not None:
                        cfg.raise_error(f"wrong size of lanes in vectorization: {axis_lens[i]}")
                sch[op].vectorize(axes[i])
            elif ann == "fuse":
                if i + 1 >= len(axes):
                    raise ValueError("'fuse' annotation on the last axis has nothing to fuse with")
                axes[i + 1] = sch[op].fuse(axes[i], axes[i + 1])
            elif ann in ANNOTATE_TABLE:
                from templtune import te

                sch[op].bind(axes[i], te.thread_axis(ann))
            else:
                raise ValueError(f"unknown annotation {ann!r}")
        return axes

    def to_json(self) -> list[Any]:
        return list(self.anns)

    @classmethod
    def from_json(cls, value: Any) -> AnnotateEntity:
        return cls(value)

    def feature(self) -> list[float]:
        out: list[float] = []
        for ann in self.anns:
            if isinstance(ann, str):
                one_hot = [0.0] * len(ANNOTATE_TABLE)
                one_hot[ANNOTATE_TABLE[ann]] = 1.0
                out.extend(one_hot)
            else:
                out.append(float(ann))
        return out

    def __repr__(self) -> str:
        return str(list(self.anns))


@dataclass(frozen=True, slots=True, repr=False)
class OtherOptionEntity(Entity):
    """A plain value chosen by ``define_knob``; read it as ``cfg[name].val``."""

    val: Any
    kind: ClassVar[str] = "ot"

    def to_json(self) -> Any:
        return self.val

    @classmethod
    def from_json(cls, value: Any) -> OtherOptionEntity:
        return cls(value)

    def feature(self) -> list[float]:
        v = self.val
        if isinstance(v, (bool, int, float)):
            return [float(v)]
        # NOTE: non-numeric knob values get a stable small code so that different values differ.
        return [float(zlib.crc32(repr(v).encode()) % 65521)]

    def __repr__(self) -> str:
        return str(self.val)


ENTITY_KINDS: dict[str, type[Entity]] = {
    c.kind: c for c in (SplitEntity, ReorderEntity, AnnotateEntity, OtherOptionEntity)
}


def entity_from_json(kind: str, value: Any) -> Entity:
    """Rebuild an entity from its JSON kind code and value."""
    cls = ENTITY_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown knob kind {kind!r} (known: {', '.join(ENTITY_KINDS)})")
    return cls.from_json(value)
