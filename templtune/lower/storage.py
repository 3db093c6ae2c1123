"""Buffer layout of the loop nest: one flat buffer per tensor and its flattened indices.

The storage half of :mod:`templtune.lower.nest` (TVM's StorageFlatten): row-major strides
(with ``storage_align`` padding), the ``Buffer`` of every argument and computed stage, and the
flat index of an access. Kept apart from the nest builder because the layout rules do not
depend on how loops and guards are placed.
"""

from __future__ import annotations

from dataclasses import dataclass

from templtune.errors import LoweringError
from templtune.lower.ir import Buffer
from templtune.schedule.bound import StageBound
from templtune.te.expr import BinOp, BinOpKind, IntImm, PrimExpr, Var, const, const_int
from templtune.te.simplify import Simplifier
from templtune.te.tensor import Tensor


@dataclass(frozen=True, slots=True)
class _Storage:
    buffer: Buffer
    mins: tuple[PrimExpr, ...]
    strides: tuple[int | PrimExpr, ...]


def _row_major(shape: list[int], aligns: dict[int, tuple[int, int]]) -> tuple[list[int], int]:
    strides = [1] * len(shape)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        if d in aligns and d != len(shape) - 1:
            f, off = aligns[d]
            acc = acc + ((off - acc) % f)
        strides[d] = acc
        acc *= shape[d]
    return strides, max(acc, 1)


def _row_major_sym(shape: list[int | PrimExpr], simp: Simplifier
                   ) -> tuple[list[int | PrimExpr], PrimExpr]:
    """Compact strides (ints where constant) and element count of a symbolic shape."""
    strides: list[int | PrimExpr] = [1] * len(shape)
    acc: int | PrimExpr = 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        e = shape[d]
        acc = acc * e if type(acc) is int and type(e) is int else simp.visit(acc * e)
    return strides, _ext_expr(acc)


def _ext_expr(e: int | PrimExpr) -> PrimExpr:
    return const(e) if isinstance(e, int) else e


class StorageLayout:
    """The buffers of a nest and the flat indices into them; the base of ``NestBuilder``."""

    simp: Simplifier
    params: list[Buffer]
    _storage: dict[Tensor, _Storage]
    _names: set[str]

    def _init_storage(self, simp: Simplifier, args: list[Tensor],
                      names: list[str] | None) -> None:
        """Set up the tables and the parameter buffers (in ``args`` order, named ``names``)."""
        self.simp = simp
        self._storage = {}
        self._names = set()
        self.params = []
        for n_arg, t in enumerate(args):
            shape = [const_int(d) for d in t.shape]
            name = names[n_arg] if names else t.name
            buf = Buffer(self._unique(name), tuple(t.shape), t.dtype, "global")
            strides: list[int | PrimExpr]
            if any(d is None for d in shape):  # a symbolic shape: strides from the shape vars
                bad = next((d for d, c in zip(t.shape, shape) if c is None and type(d) is not Var),
                           None)
                if bad is not None:
                    # NOTE: a call binds shape variables from whole dimensions only, so a
                    # compound one could not be checked against the array it describes
                    raise LoweringError(f"argument {t.name} has the compound symbolic dimension "
                                        f"{bad}; each symbolic dimension of an argument must "
                                        f"be a te.var")
                strides = _row_major_sym([d if c is None else c for d, c in zip(t.shape, shape)],
                                         self.simp)[0]
            else:
                strides = _row_major(shape, {})[0]  # type: ignore[arg-type,assignment]
            if t in self._storage:
                raise LoweringError(f"tensor {t.name} appears twice in args")
            self._storage[t] = _Storage(buf, tuple(const(0) for _ in shape), tuple(strides))
            self.params.append(buf)

    def _unique(self, name: str) -> str:
        base, k = name, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def _declare(self, info: StageBound) -> None:
        op = info.op
        aligns = {}
        for iv, f, off in info.stage.storage_aligns:
            d = next(i for i, a in enumerate(op.axis) if a is iv)
            aligns[d] = (f, off)
        shape = [info.ext[a] for a in op.axis]
        mins = tuple(info.root_min[a] for a in op.axis)
        strides: list[int | PrimExpr]
        total: int | PrimExpr
        if all(type(e) is int for e in shape):
            strides, total = _row_major(shape, aligns)  # type: ignore[assignment]
        else:
            if aligns:
                raise LoweringError(f"stage {op.name}: storage_align needs a constant shape, "
                                    f"got {tuple(str(e) for e in shape)}")
            strides, total = _row_major_sym(shape, self.simp)
        for k in range(op.num_outputs):
            t = op.output(k)
            if t in self._storage:
                continue
            name = op.name if op.num_outputs == 1 else f"{op.name}.v{k}"
            buf = Buffer(self._unique(name), (_ext_expr(total),), t.dtype, info.scope)
            self._storage[t] = _Storage(buf, mins, tuple(strides))

    def storage(self, t: Tensor) -> _Storage:
        st = self._storage.get(t)
        if st is None:
            raise LoweringError(f"tensor {t.name} is read but neither computed nor passed in "
                                f"args (placeholders must be arguments)")
        return st

    def flat(self, st: _Storage, idx: list[PrimExpr]) -> PrimExpr:
        e: PrimExpr = const(0)
        for i, m, s in zip(idx, st.mins, st.strides):
            term = i if const_int(m) == 0 else _sub(i, m)
            if type(s) is not int:
                term = term * s
            elif s != 1:
                term = _mul_const(term, s)
            e = _add(e, term)
        return self.simp.visit(e)

    def allocations(self, info: StageBound) -> list[Buffer]:
        out = []
        for k in range(info.op.num_outputs):
            buf = self._storage[info.op.output(k)].buffer
            if buf not in self.params:
                out.append(buf)
        return out


# NOTE: flat() builds every load/store index; these make the nodes the operators would make
# (no folding unless both sides are constants, same dtypes unchanged) without binary()'s
# conversions, and defer to the operators in every other case.


def _add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a + b`` exactly as the operator builds it."""
    if a.dtype == b.dtype and type(b) is not IntImm:
        return BinOp(BinOpKind.ADD, a, b, a.dtype)
    return a + b


def _sub(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a - b`` exactly as the operator builds it."""
    if a.dtype == b.dtype and type(a) is not IntImm and type(b) is not IntImm:
        return BinOp(BinOpKind.SUB, a, b, a.dtype)
    return a - b


def _mul_const(a: PrimExpr, s: int) -> PrimExpr:
    """``a * s`` exactly as the operator builds it (the literal becomes an int32 constant)."""
    if a.dtype == "int32" and type(a) is not IntImm:
        return BinOp(BinOpKind.MUL, a, IntImm("int32", s), "int32")
    return a * s
