"""Tensors and the operations that produce them.

An :class:`Operation` produces one or more :class:`Tensor` outputs. A placeholder has no body; a
compute has data-parallel ``axis`` IterVars, optional ``reduce_axis`` IterVars and one body
expression per output. Operations are immutable and compared by identity; a tensor is identified
by ``(op, value_index)`` and operations cache their output tensors, so ``op.output(0) is
op.output(0)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templtune.errors import ExprError
from templtune.te.expr import ExprLike, IterVar, PrimExpr, TensorLoad, convert


class Operation:
    """Base of placeholder and compute operations."""

    __slots__ = ()
    name: str
    tag: str

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)  # type: ignore[attr-defined]

    def output(self, i: int) -> Tensor:
        return self._outputs[i]  # type: ignore[attr-defined]

    @property
    def input_tensors(self) -> list[Tensor]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str
    tag: str = ""
    _outputs: tuple[Tensor, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_outputs", (Tensor(self, 0, self.shape, self.dtype),))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ComputeOp(Operation):
    """``out[axis...] = body`` for every point of ``axis``; ``body[i]`` computes output ``i``.
    A body that is a :class:`~templtune.te.expr.Reduce` reduces over ``reduce_axis``."""

    name: str
    tag: str
    attrs: tuple[tuple[str, Any], ...]
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...]
    body: tuple[PrimExpr, ...]
    _outputs: tuple[Tensor, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        shape = tuple(iv.dom.extent for iv in self.axis)  # type: ignore[union-attr]
        outs = tuple(Tensor(self, i, shape, b.dtype) for i, b in enumerate(self.body))
        object.__setattr__(self, "_outputs", outs)

    @property
    def input_tensors(self) -> list[Tensor]:
        from templtune.te.functor import collect_tensor_loads

        seen: dict[Tensor, None] = {}
        for b in self.body:
            for t in collect_tensor_loads(b):
                seen.setdefault(t, None)
        return list(seen)


@dataclass(frozen=True, slots=True, eq=False)
class Tensor:
    """One output of an operation. Index it (``A[i, j]``) to read it in a compute body."""

    op: Operation
    value_index: int
    shape: tuple[PrimExpr, ...]
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str:
        return self.op.name if self.op.num_outputs == 1 else f"{self.op.name}.v{self.value_index}"

    def __getitem__(self, indices: ExprLike | IterVar | tuple[Any, ...]) -> Any:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if 0 < len(indices) < len(self.shape) and not any(isinstance(i, tuple) for i in indices):
            # TVM's chained indexing ``A[i][j]``: a partial index is a TensorSlice
            return TensorSlice(self, tuple(indices))
        if len(indices) != len(self.shape):
            raise ExprError(
                f"tensor {self.name} has {len(self.shape)} dimensions, indexed with {len(indices)}"
            )
        idx = tuple(convert(i) for i in indices)
        for k, i in enumerate(idx):
            if not (i.dtype.startswith("int") or i.dtype.startswith("uint")):
                raise ExprError(f"index {k} of {self.name} is {i} of dtype {i.dtype}; indices "
                                "must be integers")
            # NOTE: no bounds check on constant indices here: a load under a guard
            # (if_then_else) may legitimately name an out-of-range element it never reads.
        return TensorLoad(self, idx)

    def __call__(self, *indices: Any) -> PrimExpr:
        """``A(i, j)`` is ``A[i, j]`` (TVM accepts both)."""
        return self[indices]

    # NOTE: tensor arithmetic builds broadcast computes (``conv + bias`` -> ``T_add``), as TVM
    # does; the implementation lives in te.broadcast (imported lazily: it imports this module).
    def _bcast(self, name: str, a: Any, b: Any) -> Any:
        from templtune.te import broadcast

        return getattr(broadcast, name)(a, b)

    def __add__(self, o: Any) -> Any:
        return self._bcast("add", self, o)

    def __radd__(self, o: Any) -> Any:
        return self._bcast("add", o, self)

    def __sub__(self, o: Any) -> Any:
        return self._bcast("subtract", self, o)

    def __rsub__(self, o: Any) -> Any:
        return self._bcast("subtract", o, self)

    def __mul__(self, o: Any) -> Any:
        return self._bcast("multiply", self, o)

    def __rmul__(self, o: Any) -> Any:
        return self._bcast("multiply", o, self)

    def __truediv__(self, o: Any) -> Any:
        return self._bcast("divide", self, o)

    def __rtruediv__(self, o: Any) -> Any:
        return self._bcast("divide", o, self)

    def __neg__(self) -> Any:
        return self._bcast("subtract", 0, self)

    def __repr__(self) -> str:
        shape = ", ".join(str(s) for s in self.shape)
        return f"Tensor(shape=[{shape}], op.name={self.op.name})"

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True, eq=False)
class TensorSlice:
    """``A[i]`` of a tensor with more dimensions: index it further (``A[i][j]``) to get a load.
    It is not an expression; using it as one is an error naming the missing indices."""

    tensor: Tensor
    indices: tuple[Any, ...]

    def __getitem__(self, more: Any) -> Any:
        more = more if isinstance(more, tuple) else (more,)
        total = self.indices + tuple(more)
        if len(total) > len(self.tensor.shape):
            raise ExprError(f"tensor {self.tensor.name} has {len(self.tensor.shape)} dimensions, "
                            f"indexed with {len(total)}")
        return self.tensor[total]

    def _not_expr(self, *_: Any) -> Any:
        raise ExprError(f"cannot use {self!r} as an expression; give all indices")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _not_expr
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __neg__ = _not_expr
    __lt__ = __le__ = __gt__ = __ge__ = _not_expr

    def __repr__(self) -> str:
        return (f"{self.tensor.name}{list(self.indices)} (a partial index: "
                f"{len(self.indices)} of {len(self.tensor.shape)} indices)")
