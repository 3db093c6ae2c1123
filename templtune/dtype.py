"""Data types: parsing and classifying dtype strings such as ``"float32"`` or ``"float32x16"``.

A dtype string is ``<base><bits>[x<lanes>]`` (``bool`` has no bit suffix). Vector dtypes appear only
in loop IR after vectorization.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from templtune.errors import DTypeError

_BASES = {"float": "float", "int": "int", "uint": "uint", "bool": "bool", "handle": "handle"}
SCALAR_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "handle",
)


@dataclass(frozen=True, slots=True)
class DType:
    """A parsed dtype: ``code`` is one of float/int/uint/bool/handle."""

    code: str
    bits: int
    lanes: int = 1

    @property
    def scalar(self) -> str:
        return "bool" if self.code == "bool" else f"{self.code}{self.bits}"

    def __str__(self) -> str:
        return self.scalar if self.lanes == 1 else f"{self.scalar}x{self.lanes}"


@cache
def parse(dtype: str) -> DType:
    """Parse a dtype string; raise :class:`DTypeError` naming it when unknown."""
    if not isinstance(dtype, str):
        raise DTypeError(f"dtype must be a string, got {dtype!r}")
    base, _, lanes_s = dtype.partition("x")
    lanes = 1
    if lanes_s:
        if not lanes_s.isdigit() or int(lanes_s) < 1:
            raise DTypeError(f"unknown dtype {dtype!r}")
        lanes = int(lanes_s)
    if base == "bool":
        return DType("bool", 1, lanes)
    if base == "handle":
        return DType("handle", 64, lanes)
    for code in ("float", "uint", "int"):
        if base.startswith(code) and base[len(code):].isdigit():
            bits = int(base[len(code):])
            if f"{code}{bits}" in SCALAR_DTYPES:
                return DType(code, bits, lanes)
    raise DTypeError(f"unknown dtype {dtype!r}; expected one of {', '.join(SCALAR_DTYPES)}")


def is_float(dtype: str) -> bool:
    return parse(dtype).code == "float"


def is_int(dtype: str) -> bool:
    return parse(dtype).code in ("int", "uint")


def is_bool(dtype: str) -> bool:
    return parse(dtype).code == "bool"


def lanes(dtype: str) -> int:
    return parse(dtype).lanes


def element_of(dtype: str) -> str:
    """The scalar dtype of a (possibly vector) dtype."""
    return parse(dtype).scalar


def with_lanes(dtype: str, n: int) -> str:
    d = parse(dtype)
    return str(DType(d.code, d.bits, n))


def itemsize(dtype: str) -> int:
    d = parse(dtype)
    return max(1, d.bits // 8) * d.lanes


def to_numpy(dtype: str) -> np.dtype:
    d = parse(dtype)
    if d.lanes != 1 or d.code == "handle":
        raise DTypeError(f"dtype {dtype!r} has no numpy equivalent")
    return np.dtype("bool" if d.code == "bool" else d.scalar)


def from_numpy(dt: np.dtype | type | str) -> str:
    s = str(np.dtype(dt))
    parse(s)
    return s
