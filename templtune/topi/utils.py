"""Helpers for operator declarations: constant shapes, padding tuples, constant matrices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune import te
from templtune.errors import ExprError
from templtune.te.broadcast import axis_names
from templtune.te.expr import IntImm, PrimExpr, convert, equal
from templtune.te.simplify import simplify

__all__ = ["axis_names", "get_const_int", "get_const_tuple", "get_pad_tuple", "const_matrix", "pair",
           "round_up"]


def get_const_int(x: Any) -> int:
    """``x`` (int or constant integer expression) as a Python int."""
    if isinstance(x, bool):
        raise ExprError(f"expected an integer, got {x!r}")
    if isinstance(x, int):
        return x
    if isinstance(x, np.integer):
        return int(x)
    e = simplify(convert(x.var if isinstance(x, te.IterVar) else x))
    if not isinstance(e, IntImm):
        raise ExprError(f"expected a constant integer, got {x}")
    return e.value


def round_up(n: int, b: int) -> int:
    """``n`` rounded up to a multiple of ``b`` (a channel count in whole blocks of ``b``)."""
    return -(-n // b) * b


def get_const_tuple(xs: Sequence[Any]) -> tuple[Any, ...]:
    """A shape as a tuple of ints; symbolic entries are kept as expressions (as TVM)."""
    out: list[Any] = []
    for x in xs:
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            out.append(int(x))
            continue
        e = simplify(convert(x))
        out.append(e.value if isinstance(e, IntImm) else e)
    return tuple(out)


def pair(x: Any, what: str) -> tuple[Any, Any]:
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ExprError(f"{what} must be an int or a pair, got {x!r}")
        return x[0], x[1]
    return x, x


def get_pad_tuple(padding: Any, kernel: tuple[int, int]) -> tuple[int, int, int, int]:
    """Padding as ``(top, left, bottom, right)`` from an int, a pair ``(h, w)``, a 4-tuple
    ``(top, left, bottom, right)`` or "SAME" / "VALID"."""
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return 0, 0, 0, 0
        if padding.upper() == "SAME":
            ph, pw = kernel[0] - 1, kernel[1] - 1
            return (ph + 1) // 2, (pw + 1) // 2, ph // 2, pw // 2
        raise ExprError(f"unknown padding {padding!r}; expected 'SAME' or 'VALID'")
    if isinstance(padding, (tuple, list)):
        if len(padding) == 2:
            ph, pw = (get_const_int(p) for p in padding)
            return ph, pw, ph, pw
        if len(padding) == 4:
            t, left, b, r = (get_const_int(p) for p in padding)
            return t, left, b, r
        raise ExprError(f"padding must be an int, a pair or a 4-tuple, got {padding!r}")
    p = get_const_int(padding)
    return p, p, p, p


def const_matrix(matrix: np.ndarray, name: str = "const_matrix", dtype: str = "float32"
                 ) -> te.Tensor:
    """A 2-D constant as a compute whose body is a chain of selects on the indices (so it can be
    inlined and folded by the compiler)."""
    m = np.asarray(matrix)
    if m.ndim != 2:
        raise ExprError(f"const_matrix needs a 2-D array, got shape {m.shape}")
    rows, cols = m.shape

    def f(i: Any, j: Any) -> PrimExpr:
        now: PrimExpr = te.const(0.0, dtype)
        for ii in range(rows):
            for jj in range(cols):
                now = te.select(te.all(equal(i % rows, ii), equal(j % cols, jj)),
                                te.const(float(m[ii, jj]), dtype), now)
        return now

    return te.compute(m.shape, f, name=name, tag="const_matrix",
                      attrs={"const_matrix": True})
