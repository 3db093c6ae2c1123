"""Inline float32 ``exp``, ``tanh``, ``sigmoid`` and ``erf`` for the LLVM backend, any width.

``llvm.exp.v16f32`` has no vector lowering without a vector math library: LLVM splits it into
one libm ``expf`` call per lane, and a loop around a scalar ``expf`` call is not vectorized
either. These bodies are branch-free polynomials that vectorize, so softmax, sigmoid, tanh and
GELU run at vector speed. They are defined once per module as ``internal alwaysinline``
functions (one per lane count), which LLVM inlines and CSEs at each call.

Accuracy (``tests/test_llvm_vmath.py`` checks it against float64 numpy): ``exp`` within 2 ulp
over its whole range, subnormal results included; ``tanh``, ``sigmoid`` and ``erf`` within 3
ulp. NaN propagates, ``exp(-inf) = 0``, ``exp(+inf) = +inf``, ``tanh(+-inf) = +-1``.

The polynomial coefficients are least-squares fits on Chebyshev nodes, of relative error
(erfc's of absolute error, as 1 - erfc is what the result keeps); ``benchmarks/studies/
vmath_fit.py`` reproduces them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache

from templtune import dtype as dt
from templtune.errors import CodegenError

from . import types as T

__all__ = ["VMATH", "MathCalls", "definition"]

V = tuple[str, str]  # (operand text, dtype), as the expression renderer passes values

# exp(x) = 2**n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2]; ln2 split so that n * _LN2_HI is
# exact for |n| <= 256 (9 significant bits) whether or not the multiply-add is fused.
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_LOG2E = 1.4426950408889634
# exp(r) = 1 + r + r^2 * P(r)
_EXP_P = (0.5, 0.16666577756404877, 0.04166685417294502, 0.008363140746951103,
          0.0013901275815442204)
# 1.5 * 2**23: adding it rounds a float below 2**22 in magnitude to a whole number, which then
# sits in the low mantissa bits (a rounding and a float-to-int conversion in one add)
_ROUND = 12582912.0
_ROUND_BITS = struct.unpack("<i", struct.pack("<f", _ROUND))[0]  # 0x4B400000
# Outside [_EXP_MIN, _EXP_MAX] exp rounds to 0 or +inf in float32; clamping there keeps
# 2**n representable as two factors 2**(n >> 1) * 2**(n - (n >> 1)).
_EXP_MIN, _EXP_MAX = -104.0, 89.0
# tanh(x) = x + x^3 * Q(x^2) for |x| < _TANH_SMALL, else sign(x) * (1 - 2 / (exp(2|x|) + 1))
_TANH_SMALL = 0.625
_TANH_Q = (-0.333333283662796, 0.13332770764827728, -0.05385095253586769, 0.02099734917283058,
           -0.006096931640058756)
# erf(x) = x * P(x^2) for |x| < 1, else 1 - C(min(|x|, _ERF_MAX) - _ERF_MID), C a polynomial
# of erfc there: no exp and no division (float32 erf rounds to 1 from 3.92 on, where erfc
# falls below half an ulp of 1)
_ERF_P = (1.1283791065216064, -0.3761262595653534, 0.1128358542919159, -0.02685381844639778,
          0.005188338458538055, -0.000801027868874371, 7.854120485717431e-05)
_ERF_C = (0.0005033267661929131, -0.0026561934500932693, 0.006535763386636972,
          -0.009832995012402534, 0.009904826991260052, -0.0067976550199091434,
          0.002963509177789092, -0.00046216652845032513, -0.000391131266951561,
          0.00030167537624947727, -5.166672053746879e-05, -2.5420496967853978e-05,
          9.124727512244135e-06)
_ERF_MAX, _ERF_MID = 3.92, 2.46


class _Body:
    """Collects the instructions of one function body over one lane count."""

    def __init__(self, lanes: int) -> None:
        self.lanes = lanes
        self.f = T.ll_type(dt.with_lanes("float32", lanes))
        self.i = T.ll_type(dt.with_lanes("int32", lanes))
        self.b = T.ll_type(dt.with_lanes("bool", lanes))
        self.sfx = T.suffix(dt.with_lanes("float32", lanes))
        self.lines: list[str] = []
        self.n = 0

    def fc(self, v: float) -> str:
        return T.const(v, dt.with_lanes("float32", self.lanes))

    def ic(self, v: int) -> str:
        return T.const(v, dt.with_lanes("int32", self.lanes))

    def op(self, text: str) -> str:
        self.n += 1
        name = f"%v{self.n}"
        self.lines.append(f"  {name} = {text}")
        return name

    def call(self, intrinsic: str, *args: str) -> str:
        f = self.f
        joined = ", ".join(f"{f} {a}" for a in args)
        return self.op(f"call {f} @llvm.{intrinsic}.{self.sfx}({joined})")

    def fma(self, a: str, b: str, c: str) -> str:
        return self.call("fmuladd", a, b, c)

    def horner(self, x: str, coeffs: tuple[float, ...]) -> str:
        acc = self.fc(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.fc(c))
        return acc

    def select(self, cond: str, a: str, b: str) -> str:
        return self.op(f"select {self.b} {cond}, {self.f} {a}, {self.f} {b}")

    def estrin(self, x: str, x2: str, coeffs: tuple[float, ...]) -> str:
        """``coeffs`` as a polynomial in ``x`` (``x2 = x * x``), in pairs: a third of Horner's
        dependent chain for six coefficients, which is what bounds a vector loop of ``exp``."""
        pairs = [self.fma(self.fc(coeffs[k + 1]), x, self.fc(coeffs[k])) if k + 1 < len(coeffs)
                 else self.fc(coeffs[k]) for k in range(0, len(coeffs), 2)]
        acc = pairs[-1]
        for p in reversed(pairs[:-1]):
            acc = self.fma(acc, x2, p)
        return acc

    def exp_parts(self, a: str) -> tuple[str, str]:
        """``(t, y)`` with ``exp(a) = 2**n * y``, ``y`` in [0.7, 1.42], where ``t`` is the i32
        bit pattern of ``_ROUND + n``, whose low bits hold ``n`` (see :meth:`pow2`)."""
        f = self.f
        t = self.fma(a, self.fc(_LOG2E), self.fc(_ROUND))
        n = self.op(f"fsub {f} {t}, {self.fc(_ROUND)}")
        r = self.fma(n, self.fc(-_LN2_HI), a)
        r = self.fma(n, self.fc(-_LN2_LO), r)
        r2 = self.op(f"fmul {f} {r}, {r}")
        y = self.fma(self.estrin(r, r2, _EXP_P), r2, r)
        return self.op(f"bitcast {f} {t} to {self.i}"), self.op(f"fadd {f} {y}, {self.fc(1.0)}")

    def pow2(self, n: str, bias: int) -> str:
        """``2**(n + bias)`` as a float, for an i32 whose low 9 bits are those of ``n`` (the
        shift drops the rest), where ``n + bias`` is a normal exponent."""
        i = self.i
        e = self.op(f"shl {i} {n}, {self.ic(23)}")
        e = self.op(f"add {i} {e}, {self.ic((127 + bias) << 23)}")
        return self.op(f"bitcast {i} {e} to {self.f}")

    def exp(self, x: str) -> str:
        f, i = self.f, self.i
        # ult/ogt: a NaN input clamps to a number here and is restored at the end
        lo = self.op(f"fcmp ult {f} {x}, {self.fc(_EXP_MIN)}")
        a = self.select(lo, self.fc(_EXP_MIN), x)
        hi = self.op(f"fcmp ogt {f} {a}, {self.fc(_EXP_MAX)}")
        a = self.select(hi, self.fc(_EXP_MAX), a)
        t, y = self.exp_parts(a)
        # n in [-150, 128]: 2**n as two normal factors (the second multiply rounds subnormals)
        n = self.op(f"sub {i} {t}, {self.ic(_ROUND_BITS)}")
        n1 = self.op(f"ashr {i} {n}, {self.ic(1)}")
        n2 = self.op(f"sub {i} {n}, {n1}")
        for k in (n1, n2):
            y = self.op(f"fmul {f} {y}, {self.pow2(k, 0)}")
        nan = self.op(f"fcmp uno {f} {x}, {x}")
        return self.select(nan, x, y)

    def exp_nonpositive(self, a: str) -> str:
        """``exp(a)`` of ``a <= 0``, or NaN (which clamps to a number: the caller restores it):
        n in [-150, 0], so ``2**(n + 64)`` is normal and one factor serves, with an exact
        ``2**-64`` after it (which rounds a subnormal result once)."""
        f = self.f
        lo = self.op(f"fcmp ult {f} {a}, {self.fc(_EXP_MIN)}")
        t, y = self.exp_parts(self.select(lo, self.fc(_EXP_MIN), a))
        y = self.op(f"fmul {f} {y}, {self.pow2(t, 64)}")
        return self.op(f"fmul {f} {y}, {self.fc(2.0 ** -64)}")

    def tanh(self, x: str) -> str:
        f = self.f
        ax = self.call("fabs", x)
        # large |x|: (1 - e) / (1 + e) of e = exp(-2|x|) <= exp(-1.25), which never overflows
        # (one scaling); 1 where e underflows
        e = self.exp_nonpositive(self.op(f"fmul {f} {ax}, {self.fc(-2.0)}"))
        big = self.op(f"fdiv {f} {self.op(f'fsub {f} {self.fc(1.0)}, {e}')}, "
                      f"{self.op(f'fadd {f} {self.fc(1.0)}, {e}')}")
        big = self.call("copysign", big, x)
        # small |x|: the odd polynomial (1 - 2/(e+1) cancels there); NaN takes this side
        z = self.op(f"fmul {f} {x}, {x}")
        x3 = self.op(f"fmul {f} {z}, {x}")
        small = self.fma(self.horner(z, _TANH_Q), x3, x)
        small = self.call("copysign", small, x)  # -0
        is_big = self.op(f"fcmp oge {f} {ax}, {self.fc(_TANH_SMALL)}")
        return self.select(is_big, big, small)

    def sigmoid(self, x: str) -> str:
        f = self.f
        # e = exp(-|x|) never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below, which keeps
        # the relative accuracy where 1 / (1 + exp(-x)) would overflow to 0 (x < -88.7).
        ax = self.call("fabs", x)
        e = self.exp_nonpositive(self.op(f"fneg {f} {ax}"))
        s = self.op(f"fdiv {f} {self.fc(1.0)}, {self.op(f'fadd {f} {e}, {self.fc(1.0)}')}")
        neg = self.op(f"fcmp olt {f} {x}, {self.fc(0.0)}")
        y = self.select(neg, self.op(f"fmul {f} {e}, {s}"), s)
        return self.select(self.op(f"fcmp uno {f} {x}, {x}"), x, y)

    def erf(self, x: str) -> str:
        f = self.f
        ax = self.call("fabs", x)
        small = self.op(f"fmul {f} {ax}, {self.horner(self.op(f'fmul {f} {ax}, {ax}'), _ERF_P)}")
        # ult: a NaN input takes the small side, which propagates it
        is_small = self.op(f"fcmp ult {f} {ax}, {self.fc(1.0)}")
        # olt-select is x86's min; the shift keeps C's powers below 1.5 (no cancellation)
        c = self.select(self.op(f"fcmp olt {f} {ax}, {self.fc(_ERF_MAX)}"), ax, self.fc(_ERF_MAX))
        t = self.op(f"fsub {f} {c}, {self.fc(_ERF_MID)}")
        big = self.op(f"fsub {f} {self.fc(1.0)}, {self.horner(t, _ERF_C)}")
        return self.call("copysign", self.select(is_small, small, big), x)


_BODIES: dict[str, Callable[[_Body, str], str]] = {"exp": _Body.exp, "tanh": _Body.tanh,
                                                   "sigmoid": _Body.sigmoid, "erf": _Body.erf}
#: names of the float32 math functions this module defines
VMATH = frozenset(_BODIES)


@cache
def definition(name: str, lanes: int) -> tuple[str, tuple[str, ...]]:
    """The symbol of the float32 ``name`` function over ``lanes`` lanes, and the module-level
    entries it needs: the declarations of the intrinsics it calls, then its definition.
    A module holds each entry once (the renderer's ``declare`` deduplicates them); the text
    is built once per process, not at every call site."""
    body = _Body(lanes)
    out = _BODIES[name](body, "%x")
    f, sfx = body.f, body.sfx
    sym = f"@templtune.{name}.{sfx}"
    intrinsics = [f"declare {f} @llvm.fmuladd.{sfx}({f}, {f}, {f})",
                  f"declare {f} @llvm.fabs.{sfx}({f})",
                  f"declare {f} @llvm.copysign.{sfx}({f}, {f})"]
    text = "\n".join([f"define internal {f} {sym}({f} %x) alwaysinline nounwind {{",
                      *body.lines, f"  ret {f} {out}", "}"])
    return sym, (*intrinsics, text)


class MathCalls:
    """The expression renderer's calls of math that LLVM has no vector lowering for (a mixin:
    the renderer provides ``op``, ``declare`` and ``cast_to``)."""

    def op(self, text: str) -> str: raise NotImplementedError  # pragma: no cover
    def declare(self, line: str) -> None: ...  # pragma: no cover
    def cast_to(self, v: V, to: str) -> V: raise NotImplementedError  # pragma: no cover

    def vmath(self, name: str, x: V) -> str:
        """``name`` (one of :data:`VMATH`) of the float32 value ``x``, inlined."""
        sym, entries = definition(name, dt.lanes(x[1]))
        for entry in entries:
            self.declare(entry)
        ty = T.ll_type(x[1])
        return self.op(f"call {ty} {sym}({ty} {x[0]})")

    def libm_erf(self, x: V) -> str:
        """erf of a float16/float64 value: libm's ``erf`` per lane (LLVM has no intrinsic)."""
        d = x[1]
        if not dt.is_float(d):
            raise CodegenError(f"intrinsic erf needs a float argument, got {d}")
        lanes, ty = dt.lanes(d), T.ll_type(d)
        self.declare("declare double @erf(double)")
        el = dt.element_of(d)
        # NOTE: half <-> double goes through float: x86 has no direct helper for it
        mid = "float32" if el == "float16" else el
        out = "poison"
        for k in range(lanes):
            v = x[0] if lanes == 1 else self.op(f"extractelement {ty} {x[0]}, i32 {k}")
            v64 = self.cast_to(self.cast_to((v, el), mid), "float64")[0]
            r64 = self.op(f"call double @erf(double {v64})")
            r = self.cast_to(self.cast_to((r64, "float64"), mid), el)[0]
            if lanes == 1:
                return r
            out = self.op(f"insertelement {ty} {out}, {T.ll_type(el)} {r}, i32 {k}")
        return out
