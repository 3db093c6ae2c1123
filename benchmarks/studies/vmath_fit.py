"""Refit the polynomial coefficients of ``templtune/codegen/llvm/vmath.py``.

Each is a least-squares fit of *relative* error on Chebyshev nodes, reweighted (Lawson's
iteration) toward the minimax fit, computed in float64 from mpmath references, then rounded
to float32. Prints the coefficient tuples and the worst error of each float32 Horner
evaluation in ulps. Needs mpmath (a test-time dependency of sympy, not of templtune).

Usage: ``python3 benchmarks/studies/vmath_fit.py``
"""

from __future__ import annotations

from collections.abc import Callable

import mpmath as mp
import numpy as np

mp.mp.dps = 40


def _fit(f: Callable[[mp.mpf], mp.mpf], lo: float, hi: float, deg: int,
         var: Callable[[np.ndarray], np.ndarray] = lambda x: x) -> list[float]:
    n = 3000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * t
    y = np.array([float(f(mp.mpf(float(v)))) for v in x])
    vand = np.vander(var(x), deg + 1, increasing=True)
    w = np.ones(n)
    for _ in range(40):
        scale = w / np.abs(y)
        c, *_ = np.linalg.lstsq(vand * scale[:, None], y * scale, rcond=None)
        r = np.abs((vand @ c - y) / y)
        w = w * np.sqrt(r / r.max() + 1e-3)
    return [float(np.float32(v)) for v in c]


def _fit_abs(f: Callable[[mp.mpf], mp.mpf], lo: float, hi: float, deg: int,
             shift: float) -> list[float]:
    """Like :func:`_fit`, but of *absolute* error, in ``x - shift``."""
    n = 3000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * t
    y = np.array([float(f(mp.mpf(float(v)))) for v in x])
    vand = np.vander(x - shift, deg + 1, increasing=True)
    w = np.ones(n)
    for _ in range(60):
        c, *_ = np.linalg.lstsq(vand * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)
        r = np.abs(vand @ c - y)
        w = w * (r / r.max() + 1e-3)
        w /= w.sum()
    return [float(np.float32(v)) for v in c]


def _horner(x: np.ndarray, coeffs: list[float]) -> np.ndarray:
    acc = np.full_like(x, np.float32(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        acc = (acc * x + np.float32(c)).astype(np.float32)
    return acc


def main() -> None:
    half_ln2 = float(mp.log(2)) / 2
    p = _fit(lambda r: (mp.e**r - 1 - r) / r**2 if r else mp.mpf(0.5), -half_ln2, half_ln2, 4)
    q = _fit(lambda z: (mp.tanh(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z
             else mp.mpf(-1) / 3, 1e-12, 0.625**2, 4)
    e = _fit(lambda x: mp.erf(x) / x if x else 2 / mp.sqrt(mp.pi), 1e-9, 1.0, 6,
             lambda x: x * x)
    c = _fit_abs(mp.erfc, 1.0, 3.92, 12, 2.46)
    print("_EXP_P =", tuple(p))
    print("_TANH_Q =", tuple(q))
    print("_ERF_P =", tuple(e))
    print("_ERF_C =", tuple(c))
    # worst error of each polynomial alone, evaluated in float32 (ulps of the exact value)
    rs = np.linspace(-half_ln2, half_ln2, 20001).astype(np.float32)
    got = (1 + rs + rs * rs * _horner(rs, p)).astype(np.float64)
    want = np.array([float(mp.e ** mp.mpf(float(v))) for v in rs])
    print("exp(r) on [-ln2/2, ln2/2]: max ulp",
          float(np.max(np.abs(got - want) / np.spacing(want.astype(np.float32)))))

    # erf on [1, 4] as 1 - erfc's polynomial of min(x, 3.92) - 2.46, in float32
    xs = np.linspace(1.0, 4.0, 200001).astype(np.float32)
    ts = (np.minimum(xs, np.float32(3.92)) - np.float32(2.46)).astype(np.float32)
    got = (np.float32(1) - _horner(ts, c)).astype(np.float64)
    want = np.array([float(mp.erf(mp.mpf(float(v)))) for v in xs])
    print("erf on [1, 4]: max ulp",
          float(np.max(np.abs(got - want) / np.spacing(want.astype(np.float32)))))


if __name__ == "__main__":
    main()
