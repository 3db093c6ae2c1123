"""LLVM type names, constants and intrinsic suffixes for templtune dtypes."""

from __future__ import annotations

import struct
from functools import cache

from templtune import dtype as dt
from templtune.errors import CodegenError

_SCALAR = {
    ("float", 16): "half", ("float", 32): "float", ("float", 64): "double",
    ("int", 8): "i8", ("int", 16): "i16", ("int", 32): "i32", ("int", 64): "i64",
    ("uint", 8): "i8", ("uint", 16): "i16", ("uint", 32): "i32", ("uint", 64): "i64",
    ("bool", 1): "i1", ("handle", 64): "ptr",
}
_SUFFIX = {"half": "f16", "float": "f32", "double": "f64", "ptr": "p0"}


@cache
def ll_type(dtype: str) -> str:
    """The LLVM register type of ``dtype`` (``float``, ``<16 x float>``, ``i1`` for bool)."""
    d = dt.parse(dtype)
    s = _SCALAR.get((d.code, d.bits))
    if s is None:
        raise CodegenError(f"dtype {dtype!r} has no LLVM type")
    return s if d.lanes == 1 else f"<{d.lanes} x {s}>"


@cache
def mem_type(dtype: str) -> str:
    """The in-memory LLVM type: like :func:`ll_type` but bool is stored as a byte (numpy)."""
    d = dt.parse(dtype)
    if d.code == "bool":
        return "i8" if d.lanes == 1 else f"<{d.lanes} x i8>"
    return ll_type(dtype)


@cache
def suffix(dtype: str) -> str:
    """Overloaded-intrinsic suffix: ``f32``, ``v16f32``, ``i32``."""
    d = dt.parse(dtype)
    s = _SCALAR[(d.code, d.bits)]
    s = _SUFFIX.get(s, s)
    return s if d.lanes == 1 else f"v{d.lanes}{s}"


def float_const(value: float, dtype: str) -> str:
    """An exactly representable LLVM float literal (hex form)."""
    bits = dt.parse(dtype).bits
    if bits == 16:
        (h,) = struct.unpack("<H", struct.pack("<e", value))
        return f"0xH{h:04X}"
    if bits == 32:
        # NOTE: LLVM spells float constants as the double with the same value, in hex.
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    (q,) = struct.unpack("<Q", struct.pack("<d", value))
    return f"0x{q:016X}"


def scalar_const(value: int | float | bool, dtype: str) -> str:
    d = dt.parse(dtype)
    if d.code == "float":
        return float_const(float(value), d.scalar)
    if d.code == "bool":
        return "true" if value else "false"
    v = int(value)
    if d.code == "uint" and v >= 2 ** (d.bits - 1):
        v -= 2**d.bits  # LLVM integer literals are read as signed
    return str(v)


def const(value: int | float | bool, dtype: str) -> str:
    """A literal of ``dtype``; vector dtypes give a splat."""
    d = dt.parse(dtype)
    s = scalar_const(value, d.scalar)
    if d.lanes == 1:
        return s
    return f"splat ({ll_type(d.scalar)} {s})"


def align_of(dtype: str) -> int:
    return max(1, dt.parse(dtype).bits // 8)
