"""CUDA C spellings for the renderer: C types, operators, math functions, literals.

Tables and literal formatting only, kept apart from :mod:`templtune.codegen.cuda.render` so the
scalarizer can check vector types without importing the renderer, and the renderer reads as
the walk over the loop IR alone.
"""

from __future__ import annotations

import math

import numpy as np

from templtune import dtype as dt
from templtune.errors import CodegenError
from templtune.te.expr import BinOpKind

_CTYPES = {
    "float32": "float", "float64": "double", "float16": "half", "int8": "signed char",
    "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
    "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
    "bool": "bool",
}
_VEC_TYPES = {("float32", 2): "float2", ("float32", 4): "float4", ("int32", 2): "int2",
              ("int32", 4): "int4"}
_INFIX = {BinOpKind.ADD: "+", BinOpKind.SUB: "-", BinOpKind.MUL: "*", BinOpKind.DIV: "/",
          BinOpKind.EQ: "==", BinOpKind.NE: "!=", BinOpKind.LT: "<", BinOpKind.LE: "<=",
          BinOpKind.GT: ">", BinOpKind.GE: ">=", BinOpKind.AND: "&&", BinOpKind.OR: "||"}
# name -> (float32 function, float64 function)
_MATH = {
    "exp": ("expf", "exp"), "exp2": ("exp2f", "exp2"), "exp10": ("exp10f", "exp10"),
    "log": ("logf", "log"), "log2": ("log2f", "log2"), "log10": ("log10f", "log10"),
    "log1p": ("log1pf", "log1p"), "sqrt": ("sqrtf", "sqrt"), "rsqrt": ("rsqrtf", "rsqrt"),
    "tanh": ("tanhf", "tanh"), "sin": ("sinf", "sin"), "cos": ("cosf", "cos"),
    "tan": ("tanf", "tan"), "erf": ("erff", "erf"), "fabs": ("fabsf", "fabs"),
    "abs": ("fabsf", "fabs"), "floor": ("floorf", "floor"), "ceil": ("ceilf", "ceil"),
    "round": ("roundf", "round"), "trunc": ("truncf", "trunc"), "pow": ("powf", "pow"),
    "fmod": ("fmodf", "fmod"), "atan": ("atanf", "atan"), "asin": ("asinf", "asin"),
    "acos": ("acosf", "acos"), "atan2": ("atan2f", "atan2"), "fma": ("fmaf", "fma"),
}
_HELPERS = {
    "tt_floordiv": (
        "__device__ __forceinline__ int tt_floordiv(int a, int b) {\n"
        "  int q = a / b;\n  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}\n"
        "__device__ __forceinline__ long long tt_floordiv(long long a, long long b) {\n"
        "  long long q = a / b;\n  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}\n"),
    "tt_floormod": (
        "__device__ __forceinline__ int tt_floormod(int a, int b) {\n"
        "  int r = a % b;\n  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n"
        "__device__ __forceinline__ long long tt_floormod(long long a, long long b) {\n"
        "  long long r = a % b;\n  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n"),
}
_RESERVED = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while bool true false class new delete this template typename "
    "namespace operator private public protected friend virtual threadIdx blockIdx blockDim "
    "gridDim warpSize half min max".split())


def ctype(dtype: str) -> str:
    d = dt.parse(dtype)
    if d.lanes != 1:
        vt = _VEC_TYPES.get((d.scalar, d.lanes))
        if vt is None:
            raise CodegenError(f"no CUDA vector type for {dtype}")
        return vt
    try:
        return _CTYPES[d.scalar]
    except KeyError:
        raise CodegenError(f"dtype {dtype} has no CUDA C type") from None


def float_literal(value: float, dtype: str) -> str:
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)" if dtype == "float32" else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(value):
        inf = "__int_as_float(0x7f800000)" if dtype == "float32" else "__longlong_as_double(0x7ff0000000000000LL)"
        return inf if value > 0 else f"(-{inf})"
    if dtype == "float32":
        short = f"{value:.6e}"
        text = short if np.float32(short) == np.float32(value) else f"{value:.9e}"
        return text + "f"
    if dtype == "float16":
        return f"((half){value:.6e}f)"
    return f"{value:.17e}"
