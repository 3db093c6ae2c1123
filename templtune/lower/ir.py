"""Loop IR: the flattened, imperative program that lowering produces and every backend renders.

Statements are frozen, slotted dataclasses compared by identity (edit with ``dataclasses.replace``).
Expressions are the scalar nodes of :mod:`templtune.te.expr` plus the memory/vector nodes defined
here: :class:`Load` (flat index into a :class:`Buffer`), :class:`Ramp`, :class:`Broadcast` and
:class:`Shuffle` (vector lanes after vectorization). A vector expression has a vector dtype such as
``"float32x16"``; ``Load``/``Store`` with a ``Ramp`` index access consecutive elements.

Thread binding for GPUs is a ``For`` of kind ``THREAD_BINDING`` with a ``thread_tag``
("blockIdx.x", "threadIdx.y", "vthread"); its ``extent`` is the launch dimension.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from templtune import dtype as dt
from templtune.te.expr import IntImm, PrimExpr, Var


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A named region of memory. ``scope`` is "global" (function argument or heap), "local"
    (registers / stack) or "shared" (GPU shared memory). ``shape`` is kept for printing, bounds
    checks and the CUDA renderer; accesses use flat element indices."""

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str
    scope: str = "global"
    data: Var = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.data is None:
            object.__setattr__(self, "data", Var(self.name, "handle"))

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.dtype}, scope={self.scope})"

    @property
    def const_size(self) -> int | None:
        """Elements of the buffer where every extent is a constant, else None."""
        size = 1
        for d in self.shape:
            if not isinstance(d, IntImm):
                return None
            size *= d.value
        return size

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Load(PrimExpr):
    """``buffer[index]``; with a vector ``index`` (a Ramp) the dtype is a vector dtype."""

    buffer: Buffer
    index: PrimExpr
    predicate: PrimExpr | None = None

    @property
    def dtype(self) -> str:  # type: ignore[override]
        n = dt.lanes(self.index.dtype)
        return self.buffer.dtype if n == 1 else dt.with_lanes(self.buffer.dtype, n)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes-1)*stride]``."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.base.dtype, self.lanes)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Broadcast(PrimExpr):
    """``value`` repeated in ``lanes`` lanes."""

    value: PrimExpr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.value.dtype, self.lanes)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Shuffle(PrimExpr):
    """Lanes of ``vector`` picked by constant ``indices``: lane ``k`` is ``vector``'s lane
    ``indices[k]`` (LLVM's ``shufflevector`` of one vector). The vectorizer reads a window of
    consecutive elements through it where lanes repeat or permute elements (a grouped conv's
    per-group broadcasts), instead of gathering them."""

    vector: PrimExpr
    indices: tuple[int, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(dt.element_of(self.vector.dtype), len(self.indices))


# ----------------------------------------------------------------------------- statements


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        from templtune.lower.printer import stmt_str

        return stmt_str(self)

    __hash__ = object.__hash__


class ForKind(enum.Enum):
    SERIAL = "for"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class For(Stmt):
    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""
    # e.g. (("pragma_auto_unroll_max_step", 16), ("pragma_unroll_explicit", 1))
    annotations: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Store(Stmt):
    buffer: Buffer
    index: PrimExpr
    value: PrimExpr
    predicate: PrimExpr | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Allocate(Stmt):
    """Allocate ``buffer`` (its ``scope`` says where) for the extent of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SeqStmt(Stmt):
    seq: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AttrStmt(Stmt):
    """An annotation around ``body`` (``"pragma_*"``, ``"storage_align"``, ...)."""

    key: str
    node: Any
    value: Any
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Evaluate(Stmt):
    """Evaluate an expression for its effect, e.g. ``Call("void", "tvm_storage_sync", ("shared",))``
    for a GPU barrier."""

    value: PrimExpr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PrimFunc:
    """A lowered function. ``params`` are the global buffers in call order."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        from templtune.lower.printer import func_str

        return func_str(self)

    __repr__ = __str__
    __hash__ = object.__hash__


def shape_vars(params: tuple[Buffer, ...]) -> tuple[Var, ...]:
    """The symbolic shape variables of ``params``, in order of first appearance: each is a
    whole dimension of some parameter, so a call binds it from that array's shape."""
    out: dict[Var, None] = {}
    for b in params:
        for d in b.shape:
            if type(d) is Var:
                out[d] = None
    return tuple(out)


def seq(*stmts: Stmt | None) -> Stmt:
    """A statement sequence, flattening nested sequences and dropping ``None``."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        else:
            out.append(s)
    return out[0] if len(out) == 1 else SeqStmt(tuple(out))


def _register_simplifier_handlers() -> None:
    # NOTE: the te-level simplifier cannot import this layer; the loop handler that narrows a
    # loop variable's range is attached here, where For is defined.
    from templtune.te.simplify import Simplifier

    Simplifier.register_handler(For, Simplifier.simplify_loop)


_register_simplifier_handlers()
