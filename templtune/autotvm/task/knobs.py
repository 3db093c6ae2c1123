"""Knobs of an AutoTVM configuration space: config-space axes and the sub-spaces
(``SplitSpace``, ``ReorderSpace``, ``AnnotateSpace``, ``OtherOptionSpace``) whose points are the
entities of :mod:`templtune.autotvm.task.entities`.

Deviations from TVM (deliberate, see SPEC §9):

* ``define_split(..., policy="verbose")`` enumerates its candidate factors **sorted** instead of in
  Python ``set`` iteration order, so index numbering is portable across interpreters.
* ``define_reorder(..., policy="identity")`` stores its permutation as a tuple (TVM stores a
  ``range``, which cannot be written to a JSON log).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from templtune.autotvm.task.entities import (  # noqa: F401  (re-exported)
    ANNOTATE_TABLE,
    ENTITY_KINDS,
    AnnotateEntity,
    Entity,
    OtherOptionEntity,
    ReorderEntity,
    SplitEntity,
    entity_from_json,
)
from templtune.te.expr import IterVar, Var, const_int

# ------------------------------------------------------------------------------------ axes


class VirtualAxis:
    """A loop axis as seen by the config space: a name and a constant ``length`` (-1 if unknown).

    Wraps an int, a loop variable (``IterVar``/``Var``) or another virtual axis; the wrapped object
    is kept in ``var`` so that reorder candidates can be matched by identity.
    """

    __slots__ = ("var", "name", "length")

    var: Any
    name: str
    length: int

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
    # NOTE: TVM's name; it shadows tuple.index, which no caller of an Axis uses.
    index: int  # type: ignore[assignment]


def _as_axes(axes: Any) -> list[VirtualAxis]:
    if not isinstance(axes, (list, tuple)):
        axes = [axes]
    return [a if isinstance(a, VirtualAxis) else VirtualAxis(a) for a in axes]


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
        self.entities: list[Entity] = list(ents)

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


def factor_splits(n: int, num_outputs: int) -> list[list[int]]:
    """The exact splits of ``n`` into ``num_outputs`` factors (``[-1, f1, ...]``), in the order
    of ``define_split``'s ``factors`` policy: for templates that add candidates of their own."""
    return _enumerate_splits(n, divisors(n), num_outputs - 1, True)


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
