"""The LLVM backend's inline float32 ``exp``, ``tanh`` and ``sigmoid`` (codegen/llvm/vmath.py).

Oracle: numpy in float64, rounded to float32; errors are counted in float32 ulps of the exact
value (subnormal spacing below 2**-126). Every lane width renders the same polynomial, so the
scalar body and each vector width must agree bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from templtune.build_module import build
from templtune.codegen.llvm.testing import elementwise
from templtune.codegen.llvm.vmath import VMATH, definition
from templtune.te.expr import Call

N = 4096
REFS = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "erf": np.vectorize(math.erf, otypes=[np.float64])}
MAX_ULP = {"exp": 2.0, "tanh": 3.0, "sigmoid": 3.0, "erf": 3.0}
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72283, 88.7229, 89.5, -87.33654,
                    -103.97, -104.5, -150.0, 1e-30, -1e-30, 1e-45, 3e38, -3e38, 0.625, -0.625,
                    0.62499994, 9.0, -9.0, 20.0, -20.0], np.float32)


def _fn(name: str, lanes: int, n: int = N):  # noqa: ANN202
    return build(elementwise(lambda a: Call("float32", name, (a,)), ["float32"], "float32", n,
                             lanes), target="llvm")


def _apply(name: str, x: np.ndarray, lanes: int) -> np.ndarray:
    n = -(-x.size // 16) * 16
    a = np.zeros(n, np.float32)
    a[:x.size] = x
    out = np.zeros(n, np.float32)
    _fn(name, lanes, n)(a, out)
    return out[:x.size]


def _ulps(got: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
    """Error in float32 ulps of the exact value; 0 where that overflows float32 or is NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        want = REFS[name](x.astype(np.float64))
        finite = np.abs(want) < float(np.finfo(np.float32).max)
        spacing = np.maximum(np.spacing(np.abs(want.astype(np.float32))),
                             np.float32(2.0**-149))
        err = np.abs(got.astype(np.float64) - want) / spacing
    return np.where(finite, err, 0.0)


def _sample(name: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    wide = {"exp": (-104.0, 89.0), "tanh": (-12.0, 12.0), "sigmoid": (-104.0, 89.0),
            "erf": (-6.0, 6.0)}[name]
    return np.concatenate([rng.uniform(*wide, N), rng.uniform(-1, 1, N),
                           rng.uniform(-0.7, 0.7, N), rng.uniform(-103.9, -86.0, N)]
                          ).astype(np.float32)


@pytest.mark.parametrize("lanes", [1, 4, 8, 16])
@pytest.mark.parametrize("name", sorted(REFS))
def test_accuracy_in_ulps(name: str, lanes: int) -> None:
    x = _sample(name)
    err = _ulps(_apply(name, x, lanes), x, name)
    assert err.max() <= MAX_ULP[name], (x[err.argmax()], err.max())


@pytest.mark.parametrize("name", sorted(REFS))
def test_special_values(name: str) -> None:
    got = _apply(name, SPECIAL, 16)
    with np.errstate(over="ignore"):
        want = REFS[name](SPECIAL.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    close = np.isclose(got[ok], want[ok], rtol=4e-7, atol=0) | (got[ok] == want[ok])
    # subnormal results are checked in ulps (rtol is meaningless there)
    tiny = np.abs(want[ok]) < np.finfo(np.float32).tiny
    assert np.all(close | (tiny & (_ulps(got, SPECIAL, name)[ok] <= MAX_ULP[name]))), (
        SPECIAL[ok], got[ok], want[ok])
    np.testing.assert_array_equal(np.signbit(got[ok & (want == 0)]),
                                  np.signbit(want[ok & (want == 0)]))


@pytest.mark.parametrize("name", sorted(REFS))
def test_every_lane_width_computes_the_same_bits(name: str) -> None:
    x = _sample(name)
    base = _apply(name, x, 1)
    for lanes in (4, 8, 16):
        np.testing.assert_array_equal(_apply(name, x, lanes).view(np.uint32),
                                      base.view(np.uint32))


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, 64, elements=st.floats(width=32, allow_nan=True,
                                                     allow_infinity=True)))
def test_any_float32_input(x: np.ndarray) -> None:
    for name in ("exp", "tanh", "erf"):
        got = _apply(name, x, 8)
        with np.errstate(over="ignore", invalid="ignore"):
            want = REFS[name](x.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert _ulps(got, x, name).max() <= MAX_ULP[name]
        big = np.isinf(want)
        np.testing.assert_array_equal(got[big], want[big])


@pytest.mark.parametrize("name", sorted(VMATH))
def test_vector_body_has_no_libm_call(name: str) -> None:
    """The point of the module: no per-lane ``expf``/``tanhf`` call in a vector loop."""
    asm = _fn(name, 16, 256).get_source("asm")
    assert not any(f"{fn}f" in asm for fn in ("exp", "tanh", "erf"))
    sym, entries = definition(name, 16)
    assert sym == f"@templtune.{name}.v16f32" and entries[-1].startswith("define internal")


def test_erf_every_few_floats_of_its_range() -> None:
    """Every 8th float32 of [0.25, 4.5]: both polynomials, the switch at 1, the clamp at 3.92."""
    lo, hi = (np.array([0.25, 4.5], np.float32).view(np.uint32))
    x = np.arange(lo, hi, 8, dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, -x])
    err = _ulps(_apply("erf", x, 16), x, "erf")
    assert err.max() <= MAX_ULP["erf"], (x[err.argmax()], err.max())


def test_erf_is_polynomials_alone() -> None:
    """erf's cost is its polynomials: no division and no exp (its 2**n bit tricks) inside."""
    ll = definition("erf", 16)[1][-1]
    assert "fdiv" not in ll and "shl" not in ll and "bitcast" not in ll


def test_float64_keeps_the_libm_intrinsic() -> None:
    f = build(elementwise(lambda a: Call("float64", "exp", (a,)), ["float64"], "float64", 64),
              target="llvm")
    x = np.linspace(-20, 20, 64)
    out = np.zeros(64)
    f(x, out)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-15)
    assert "llvm.exp.f64" in f.get_source("ll")


@pytest.mark.parametrize("dtype,lanes,tol", [("float64", 1, 1e-16), ("float64", 4, 1e-16),
                                             ("float16", 8, 1e-3)])
def test_erf_of_other_float_widths_calls_libm_per_lane(dtype: str, lanes: int,
                                                       tol: float) -> None:
    f = build(elementwise(lambda a: Call(dtype, "erf", (a,)), [dtype], dtype, 64, lanes),
              target="llvm")
    x = np.linspace(-5, 5, 64).astype(dtype)
    out = np.zeros(64, dtype)
    f(x, out)
    np.testing.assert_allclose(out, REFS["erf"](x.astype(np.float64)), rtol=0, atol=tol)
