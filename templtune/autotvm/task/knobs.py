"""Knobs of an AutoTVM configuration space: the sub-spaces (``SplitSpace``, ``ReorderSpace``,
``AnnotateSpace``, ``OtherOptionSpace``) and their points, the *entities*.

Each entity class owns its JSON encoding (a two-letter ``kind`` code and a JSON value, as in
AutoTVM logs) and its numeric feature vector. Entities are frozen, slotted dataclasses that
compare by value.

Deviations from TVM (deliberate, see SPEC §9):

* ``define_split(..., policy="verbose")`` enumerates its candidate factors **sorted** instead of in
  Python ``set`` iteration order, so index numbering is portable across interpreters.
* ``define_reorder(..., policy="identity")`` stores its permutation as a tuple (TVM stores a
  ``range``, which cannot be written to a JSON log).
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from templtune.te.expr import IterVar, Var, const_int

# ------------------------------------------------------------------------------------ axes


class VirtualAxis:
    """A loop axis as seen by the config space: a name and a constant ``length`` (-1 if unknown).

    Wraps an int, a loop variable (``IterVar``/``Var``) or another virtual axis; the wrapped object
    is kept in ``var`` so that reorder candidates can be matched by identity.
    """

    __slots__ = ("var", "name", "length")

    def __init__(self, var: Any, name: str | None = None) -> None:
        self.var = var
        if isinstance(var, VirtualAxis):
            self.var, self.name, self.length = var.var, var.name, var.length
            return
        if isinstance(var, bool):
            raise TypeError("an axis length must be an int, not bool")
        if isinstance(var, int):
            self.name, self.length = name or f"axis_{var}", var
        elif isinstance(var, IterVar):
            self.name = name or var.var.name
            ext = None if var.dom is None else const_int(var.dom.extent)
            self.length = -1 if ext is None else ext
        elif isinstance(var, Var):
            self.name, self.length = name or var.name, -1
        elif hasattr(var, "dom"):
            # NOTE: duck-typed schedule axes (anything with ``dom.extent``) are accepted so the
            # space does not depend on the schedule layer's classes.
            dom = var.dom
            ext = None if dom is None else const_int(dom.extent)
            self.name = name or str(getattr(getattr(var, "var", None), "name", "axis"))
            self.length = -1 if ext is None else ext
        else:
            raise TypeError(f"cannot use {type(var).__name__} {var!r} as a config-space axis")

    def __repr__(self) -> str:
        return f"vaxis({self.name}, {self.length})"


class Axis(NamedTuple):
    """One output axis of a ``define_*`` call: the defining knob space and the output position."""

    space: Any
    index: int


def _as_axes(axes: Any) -> list[VirtualAxis]:
    if not isinstance(axes, (list, tuple)):
        axes = [axes]
    return [a if isinstance(a, VirtualAxis) else VirtualAxis(a) for a in axes]


# -------------------------------------------------------------------------------- entities

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


# ---------------------------------------------------------------------------------- spaces


class KnobSpace:
    """Base of knob sub-spaces: an ordered list of entities and a number of output axes."""

    __slots__ = ("entities", "num_output", "policy")

    entities: list[Entity]
    num_output: int
    policy: str

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, index: int) -> Entity:
        return self.entities[index]


def divisors(n: int) -> list[int]:
    """All divisors of ``n`` in ascending order."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _powers_of_two(n: int) -> list[int]:
    out, x = [], 1
    while x <= n:
        out.append(x)
        x *= 2
    return out


class SplitSpace(KnobSpace):
    """All ways to split one axis of length ``product`` into ``num_outputs`` loops."""

    __slots__ = ("product",)

    def __init__(self, axes: Sequence[VirtualAxis], policy: str = "factors", *, num_outputs: int,
                 max_factor: int = 1 << 31, filter: Callable[[SplitEntity], bool] | None = None,
                 no_tail: bool | None = None, candidate: Sequence[Sequence[int]] | None = None
                 ) -> None:
        if len(axes) != 1:
            raise ValueError("define_split takes exactly one axis")
        if num_outputs < 1:
            raise ValueError(f"num_outputs must be >= 1, got {num_outputs}")
        self.policy, self.num_output = policy, int(num_outputs)
        self.product = n = axes[0].length
        if no_tail is None:
            no_tail = policy == "factors"
        if policy == "candidate":
            if candidate is None:
                raise ValueError("define_split(policy='candidate') needs candidate=[[...], ...]")
            ents = []
            for c in candidate:
                if len(c) != num_outputs:
                    raise ValueError(f"candidate {list(c)} does not have {num_outputs} factors")
                ents.append(SplitEntity(c))
        else:
            if n < 1:
                raise ValueError(f"cannot split an axis of unknown or empty length ({n})")
            if policy == "factors":
                factors = divisors(n)
            elif policy == "power2":
                factors = _powers_of_two(n)
            elif policy == "verbose":
                # NOTE: sorted, unlike TVM's set order (SPEC §9.2): portable index numbering.
                factors = sorted(set(divisors(n)) | set(_powers_of_two(n)))
            else:
                raise ValueError(f"unknown split policy {policy!r} "
                                 "(factors, power2, verbose, candidate)")
            factors = [f for f in factors if f <= max_factor]
            ents = [SplitEntity(s) for s in _enumerate_splits(n, factors, num_outputs - 1,
                                                              bool(no_tail))]
        if filter is not None:
            ents = [e for e in ents if filter(e)]
        self.entities = ents

    def __repr__(self) -> str:
        return (f"Split(policy={self.policy}, product={self.product}, "
                f"num_outputs={self.num_output}) len={len(self)}")


def _enumerate_splits(n: int, factors: list[int], depth: int, no_tail: bool) -> list[list[int]]:
    """Depth-first product of ``factors`` over ``depth`` positions (the first position varies
    slowest); a leaf with product ``p`` is kept if ``n % p == 0``, or ``p < n`` with tails."""
    out: list[list[int]] = []
    stack: list[int] = []

    def dfs(prod: int) -> None:
        if len(stack) == depth:
            if n % prod == 0 or (not no_tail and prod < n):
                out.append([-1] + stack[::-1])
            return
        for f in factors:
            p = prod * f
            if p > n:
                break  # factors ascend: every later one overflows too
            if no_tail and n % p != 0:
                continue  # a non-divisor can never become a divisor by multiplying further
            stack.append(f)
            dfs(p)
            stack.pop()

    dfs(1)
    return out


def _merge_chains(chains: Sequence[Sequence[int]]) -> list[int]:
    """Interleave chains, always taking from the chain with the most remaining elements (ties:
    lowest chain index). This is the only order TVM's restricted DFS can produce."""
    pos = [0] * len(chains)
    out: list[int] = []
    total = sum(len(c) for c in chains)
    while len(out) < total:
        rem = [len(c) - p for c, p in zip(chains, pos)]
        j = rem.index(max(rem))
        out.append(chains[j][pos[j]])
        pos[j] += 1
    return out


class ReorderSpace(KnobSpace):
    """Permutations of a list of axes."""

    __slots__ = ()

    def __init__(self, axes: Sequence[VirtualAxis], policy: str, **kwargs: Any) -> None:
        self.policy, self.num_output = policy, len(axes)
        n = len(axes)

        def index_of(a: Any) -> int:
            for i, ax in enumerate(axes):
                if ax is a:
                    return i
            # NOTE: then by the wrapped loop variable; ints are not identities, skip them.
            var = a.var if isinstance(a, VirtualAxis) else a
            if not isinstance(var, int):
                for i, ax in enumerate(axes):
                    if ax.var is var:
                        return i
            raise ValueError(f"{a!r} is not one of the axes of this reorder knob")

        if policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "all":
            perms = list(itertools.permutations(range(n)))
        elif policy == "interval_all":
            b, e = kwargs["interval"]
            perms = [tuple(range(b)) + p + tuple(range(e, n))
                     for p in itertools.permutations(range(b, e))]
        elif policy == "candidate":
            perms = [tuple(index_of(a) for a in cand) for cand in kwargs["candidate"]]
        elif policy in ("interleave", "interleave_cuda"):
            spatial = [[index_of(a) for a in ch] for ch in kwargs["spatial"]]
            reduce = [[index_of(a) for a in ch] for ch in kwargs["reduce"]]
            outer = _merge_chains([ch[:-1] for ch in spatial])
            if policy == "interleave":
                inner = _merge_chains([ch[-1:] for ch in spatial] + reduce)
                perms = [tuple(outer + inner)]
            else:
                perms = [tuple(outer + _merge_chains(reduce)
                               + _merge_chains([ch[-1:] for ch in spatial]))]
        else:
            raise ValueError(f"unknown reorder policy {policy!r}")
        self.entities = [ReorderEntity(p) for p in perms]

    def __repr__(self) -> str:
        return f"Reorder(policy={self.policy}) len={len(self)}"


_BIND_GPU = [(6, ["blockIdx.z", "blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y",
                  "threadIdx.x"]),
             (4, ["blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x"]),
             (2, ["blockIdx.x", "threadIdx.x"])]
_BIND_GPU_VIRTUAL = [(9, ["blockIdx.z", "blockIdx.y", "blockIdx.x", "vthread", "vthread",
                          "vthread", "threadIdx.z", "threadIdx.y", "threadIdx.x"]),
                     (6, ["blockIdx.y", "blockIdx.x", "vthread", "vthread", "threadIdx.y",
                          "threadIdx.x"]),
                     (3, ["blockIdx.x", "vthread", "threadIdx.x"])]


class AnnotateSpace(KnobSpace):
    """Annotations (unroll / vectorize / thread binding / cache location) of a list of axes."""

    __slots__ = ()

    def __init__(self, axes: Sequence[VirtualAxis], policy: str, **kwargs: Any) -> None:
        self.policy, self.num_output = policy, len(axes)
        n = len(axes)
        if policy in ("bind_gpu", "bind_gpu_virtual"):
            table = _BIND_GPU if policy == "bind_gpu" else _BIND_GPU_VIRTUAL
            for k, tags in table:
                if n >= k:
                    self.entities = [AnnotateEntity(["fuse"] * (n - k) + tags)]
                    return
            raise ValueError(f"policy {policy!r} needs at least {table[-1][0]} axes, got {n}")
        if policy == "locate_cache":
            m = kwargs["num_anchor"]
            self.num_output = m
            self.entities = [AnnotateEntity(c) for c in itertools.combinations(range(n), m)]
            return
        tokens = policy.replace("try", "none").split("_")
        for t in tokens:
            if t not in ("none", "unroll", "vec"):
                raise ValueError(f"unknown annotate policy {policy!r} (bad token {t!r})")
        self.entities = [AnnotateEntity(p) for p in itertools.product(tokens, repeat=n)
                         if p.count("vec") <= 1]

    def __repr__(self) -> str:
        return f"Annotate(policy={self.policy}) len={len(self)}"


class OtherOptionSpace(KnobSpace):
    """A list of candidate values (``define_knob``)."""

    __slots__ = ()

    def __init__(self, axes: Sequence[VirtualAxis], policy: str = "", *,
                 candidate: Sequence[Any]) -> None:
        self.policy, self.num_output = policy, 0
        self.entities = [OtherOptionEntity(v) for v in candidate]

    def __repr__(self) -> str:
        return f"OtherOption({self.entities!r}) len={len(self)}"
