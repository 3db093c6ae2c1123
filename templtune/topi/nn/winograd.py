"""Winograd convolution F(m x m, r x r) in NCHW.

The transform matrices are generated (Cook-Toom / Lavin), not typed in: with ``n = m + r - 1``
points ``a_0 .. a_{n-2}`` (0, 1, -1, 2, -2, 1/2, -1/2, 3, ...) plus the point at infinity,

* ``A^T[i, j] = a_j**i`` (``m x n``; the infinity column is ``[0, .., 0, 1]``),
* ``G[j, k] = a_j**k / f_j`` with ``f_j = prod_{l != j} (a_j - a_l)`` (``n x r``; infinity row
  ``[0, .., 0, 1]``),
* ``B^T[j]`` = coefficients of ``prod_{l != j} (x - a_l)`` and, for the infinity row, of
  ``prod_l (x - a_l)`` (``n x n``),

so that ``A^T [(G g) * (B^T d)]`` is the correlation of a length-``n`` tile ``d`` with the
length-``r`` filter ``g`` (the transposed Toom-Cook polynomial multiplication). Exact rational
arithmetic is used to build them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from templtune import te
from templtune.errors import ExprError
from templtune.topi.nn.pad import pad
from templtune.topi.utils import const_matrix, get_const_tuple, get_pad_tuple

__all__ = ["winograd_transform_matrices", "interpolation_points",
           "conv2d_winograd_weight_transform", "conv2d_winograd_nchw", "conv2d_winograd_nhwc"]


def interpolation_points(count: int) -> list[Fraction]:
    """The first ``count`` points of 0, 1, -1, 2, -2, 1/2, -1/2, 3, -3, 1/3, -1/3, ..."""
    pts: list[Fraction] = [Fraction(0)]
    k = 1
    while len(pts) < count:
        for p in (Fraction(k), Fraction(-k)) + ((Fraction(1, k), Fraction(-1, k)) if k > 1
                                                 else ()):
            if p not in pts:
                pts.append(p)
        k += 1
    return pts[:count]


def _poly_from_roots(roots: list[Fraction]) -> list[Fraction]:
    """Coefficients (constant term first) of ``prod (x - r)``."""
    coef = [Fraction(1)]
    for r in roots:
        nxt = [Fraction(0)] * (len(coef) + 1)
        for i, c in enumerate(coef):
            nxt[i] -= r * c
            nxt[i + 1] += c
        coef = nxt
    return coef


def winograd_transform_matrices(m: int, r: int, dtype: str = "float32"
                                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matrices ``(A, B, G)`` of Winograd F(m, r).

    Returns
    -------
    A : ndarray, shape (n, m)
        Output (inverse) transform; ``Y = A^T M A``.
    B : ndarray, shape (n, n)
        Input transform; ``V = B^T d B``.
    G : ndarray, shape (n, r)
        Filter transform; ``U = G g G^T``.
    """
    if m < 1 or r < 1:
        raise ExprError(f"winograd F({m}, {r}) needs m >= 1 and r >= 1")
    n = m + r - 1
    pts = interpolation_points(n - 1)
    at = [[Fraction(0)] * n for _ in range(m)]
    g = [[Fraction(0)] * r for _ in range(n)]
    bt = [[Fraction(0)] * n for _ in range(n)]
    for j, a in enumerate(pts):
        others = [p for p in pts if p != a]
        f = Fraction(1)
        for p in others:
            f *= a - p
        for i in range(m):
            at[i][j] = a ** i
        for k in range(r):
            g[j][k] = a ** k / f
        coef = _poly_from_roots(others)
        for i, c in enumerate(coef):
            bt[j][i] = c
    at[m - 1][n - 1] = Fraction(1)
    g[n - 1][r - 1] = Fraction(1)
    for i, c in enumerate(_poly_from_roots(pts)):
        bt[n - 1][i] = c
    npd = np.dtype(dtype)
    a_mat = np.array([[float(x) for x in row] for row in at], dtype=npd).T
    b_mat = np.array([[float(x) for x in row] for row in bt], dtype=npd).T
    g_mat = np.array([[float(x) for x in row] for row in g], dtype=npd)
    return a_mat, b_mat, g_mat


def _tile(tile_size: int, r: int) -> int:
    if tile_size < 1:
        raise ExprError(f"winograd tile_size must be positive, got {tile_size}")
    return tile_size + r - 1


def _tile_grid(h: int, w: int, r: int, m: int, alpha: int, padding: Any
               ) -> tuple[tuple[int, int, int, int], int, int, int, int, int, int]:
    """Padding ``(top, left, bottom, right)``, output ``out_h, out_w``, tile counts ``nh, nw``
    and the extra bottom/right padding ``eh, ew`` of a stride-1 Winograd convolution."""
    pt, pl, pb, pr = get_pad_tuple(padding, (r, r))
    out_h, out_w = h + pt + pb - r + 1, w + pl + pr - r + 1
    if out_h <= 0 or out_w <= 0:
        raise ExprError(f"winograd: empty output for {h}x{w} input and {r}x{r} kernel")
    nh, nw = -(-out_h // m), -(-out_w // m)
    # NOTE: pad extra rows/columns so that the last (partial) tile reads inside data_pad
    eh = (nh - 1) * m + alpha - (h + pt + pb)
    ew = (nw - 1) * m + alpha - (w + pl + pr)
    return (pt, pl, pb, pr), out_h, out_w, nh, nw, eh, ew


def _filter_transform(m: int, r: int, dtype: str) -> tuple[te.Tensor, Any, Any]:
    """The constant ``G`` of F(m, r) and the two ``r``-long reduce axes of ``G g G^T``."""
    # NOTE: the callers write their own compute: te names the axes after the lambda's
    # parameters, and the two layouts keep their own axis names.
    _, _, g_np = winograd_transform_matrices(m, r, dtype)
    G = const_matrix(g_np, "G", dtype)
    return G, te.reduce_axis((0, r), name="r_kh"), te.reduce_axis((0, r), name="r_kw")


def conv2d_winograd_weight_transform(kernel: te.Tensor, tile_size: int) -> te.Tensor:
    """Transform an OIHW kernel to ``kernel_pack[eps, nu, ci, co] = (G g G^T)[eps, nu]``
    (shape ``[alpha, alpha, CI, CO]``), the layout ``conv2d_winograd_nchw`` takes with
    ``pre_transformed=True``."""
    co, ci, kh, kw = get_const_tuple(kernel.shape)
    if kh != kw:
        raise ExprError(f"winograd needs a square kernel, got {kh}x{kw}")
    alpha = _tile(tile_size, kh)
    G, r_kh, r_kw = _filter_transform(tile_size, kh, kernel.dtype)
    return te.compute(
        (alpha, alpha, ci, co),
        lambda eps, nu, ci_, co_: te.sum(kernel[co_, ci_, r_kh, r_kw] * G[eps, r_kh]
                                         * G[nu, r_kw], axis=[r_kh, r_kw]),
        name="kernel_pack", tag="winograd_kernel_pack")


def conv2d_winograd_nchw(data: te.Tensor, kernel: te.Tensor, padding: Any, tile_size: int = 2,
                         pre_transformed: bool = False, out_dtype: str | None = None
                         ) -> te.Tensor:
    """Stride-1, dilation-1 convolution by Winograd F(m x m, r x r), ``m = tile_size``.

    Built from separately schedulable computes: ``data_pad``, ``d`` (input tiles),
    ``data_pack`` (``B^T d B``), ``kernel_pack`` (``G g G^T``, unless ``pre_transformed``),
    ``bgemm`` (batched GEMM over input channels), ``inverse`` (``A^T M A``) and ``output``
    (tag ``"conv2d_nchw_winograd"``), plus the constant matrices ``A``, ``B``, ``G``.

    Parameters
    ----------
    data : Tensor
        ``[N, CI, H, W]``.
    kernel : Tensor
        OIHW ``[CO, CI, r, r]``, or ``[alpha, alpha, CI, CO]`` when ``pre_transformed``.
    padding : int, (h, w) or (top, left, bottom, right)
    tile_size : int
        ``m``: 2 or 4 (any positive value works; large tiles lose precision).
    """
    out_dtype = out_dtype or data.dtype
    n_, ci, h, w = get_const_tuple(data.shape)
    m = tile_size
    if pre_transformed:
        alpha, alpha2, kci, co = get_const_tuple(kernel.shape)
        r = alpha - m + 1
        if alpha != alpha2 or r < 1:
            raise ExprError(f"pre-transformed kernel shape {(alpha, alpha2, kci, co)} does not "
                            f"match tile_size {m}")
        kernel_pack = kernel
    else:
        co, kci, r, r2 = get_const_tuple(kernel.shape)
        if r != r2:
            raise ExprError(f"winograd needs a square kernel, got {r}x{r2}")
        alpha = _tile(m, r)
        kernel_pack = conv2d_winograd_weight_transform(kernel, m)
    if kci != ci:
        raise ExprError(f"kernel has {kci} input channels, data has {ci}")
    (pt, pl, pb, pr), out_h, out_w, nh, nw, eh, ew = _tile_grid(h, w, r, m, alpha, padding)
    p_total = n_ * nh * nw
    data_pad = pad(data, (0, 0, pt, pl), (0, 0, pb + eh, pr + ew), name="data_pad")
    a_np, b_np, g_np = winograd_transform_matrices(m, r, out_dtype)
    A = const_matrix(a_np, "A", out_dtype)
    B = const_matrix(b_np, "B", out_dtype)
    d = te.compute(
        (ci, p_total, alpha, alpha),
        lambda c, p, eps, nu: data_pad[p // (nh * nw), c, (p // nw) % nh * m + eps,
                                       p % nw * m + nu],
        name="d")
    r_a = te.reduce_axis((0, alpha), name="r_a")
    r_b = te.reduce_axis((0, alpha), name="r_b")
    data_pack = te.compute(
        (alpha, alpha, ci, p_total),
        lambda eps, nu, c, p: te.sum(d[c, p, r_a, r_b].astype(out_dtype) * B[r_a, eps]
                                     * B[r_b, nu], axis=[r_a, r_b]),
        name="data_pack")
    rc = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute(
        (alpha, alpha, co, p_total),
        lambda eps, nu, k, p: te.sum(kernel_pack[eps, nu, rc, k].astype(out_dtype)
                                     * data_pack[eps, nu, rc, p], axis=rc),
        name="bgemm")
    r_a2 = te.reduce_axis((0, alpha), name="r_a")
    r_b2 = te.reduce_axis((0, alpha), name="r_b")
    inverse = te.compute(
        (co, p_total, m, m),
        lambda k, p, vh, vw: te.sum(bgemm[r_a2, r_b2, k, p] * A[r_a2, vh] * A[r_b2, vw],
                                    axis=[r_a2, r_b2]),
        name="inverse")
    return te.compute(
        (n_, co, out_h, out_w),
        lambda n, k, hh, ww: inverse[k, n * (nh * nw) + (hh // m) * nw + ww // m, hh % m,
                                     ww % m],
        name="output", tag="conv2d_nchw_winograd",
        attrs={"tile_size": m})




def conv2d_winograd_nhwc(data: te.Tensor, weight: te.Tensor, padding: Any, tile_size: int = 2,
                         pre_transformed: bool = False, out_dtype: str | None = None
                         ) -> te.Tensor:
    """Stride-1 Winograd convolution in NHWC (the auto-scheduler layout).

    Parameters
    ----------
    data : Tensor
        ``[N, H, W, CI]``.
    weight : Tensor
        HWIO ``[r, r, CI, CO]``, or ``[alpha, alpha, CO, CI]`` when ``pre_transformed``.

    Returns
    -------
    Tensor
        ``conv2d_winograd`` (tag ``"conv2d_winograd_nhwc"``) over ``data_pad``, ``input_tile``,
        ``data_pack``, ``bgemm`` and ``inverse``.
    """
    out_dtype = out_dtype or data.dtype
    n_, h, w, ci = get_const_tuple(data.shape)
    m = tile_size
    if pre_transformed:
        alpha, _, co, kci = get_const_tuple(weight.shape)
        r = alpha - m + 1
        kernel_pack = weight
    else:
        r, r2, kci, co = get_const_tuple(weight.shape)
        if r != r2:
            raise ExprError(f"winograd needs a square kernel, got {r}x{r2}")
        alpha = _tile(m, r)
        G, r_kh, r_kw = _filter_transform(m, r, out_dtype)
        kernel_pack = te.compute(
            (alpha, alpha, co, ci),
            lambda eps, nu, k, c: te.sum(weight[r_kh, r_kw, c, k] * G[eps, r_kh] * G[nu, r_kw],
                                         axis=[r_kh, r_kw]),
            name="kernel_pack")
    if kci != ci or r < 1:
        raise ExprError(f"winograd weight shape {get_const_tuple(weight.shape)} does not match "
                        f"data with {ci} channels and tile_size {m}")
    (pt, pl, pb, pr), out_h, out_w, nh, nw, eh, ew = _tile_grid(h, w, r, m, alpha, padding)
    p_total = n_ * nh * nw
    data_pad = pad(data, (0, pt, pl, 0), (0, pb + eh, pr + ew, 0), name="data_pad")
    a_np, b_np, _ = winograd_transform_matrices(m, r, out_dtype)
    A = const_matrix(a_np, "A", out_dtype)
    B = const_matrix(b_np, "B", out_dtype)
    input_tile = te.compute(
        (alpha, alpha, p_total, ci),
        lambda eps, nu, p, c: data_pad[p // (nh * nw), (p // nw) % nh * m + eps,
                                       p % nw * m + nu, c],
        name="input_tile")
    r_a = te.reduce_axis((0, alpha), name="r_a")
    r_b = te.reduce_axis((0, alpha), name="r_b")
    data_pack = te.compute(
        (alpha, alpha, p_total, ci),
        lambda eps, nu, p, c: te.sum(input_tile[r_a, r_b, p, c].astype(out_dtype)
                                     * B[r_a, eps] * B[r_b, nu], axis=[r_a, r_b]),
        name="data_pack")
    rc = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute(
        (alpha, alpha, p_total, co),
        lambda eps, nu, p, k: te.sum(data_pack[eps, nu, p, rc]
                                     * kernel_pack[eps, nu, k, rc].astype(out_dtype), axis=rc),
        name="bgemm")
    r_a2 = te.reduce_axis((0, alpha), name="r_a")
    r_b2 = te.reduce_axis((0, alpha), name="r_b")
    inverse = te.compute(
        (m, m, p_total, co),
        lambda vh, vw, p, k: te.sum(bgemm[r_a2, r_b2, p, k] * A[r_a2, vh] * A[r_b2, vw],
                                    axis=[r_a2, r_b2]),
        name="inverse")
    return te.compute(
        (n_, out_h, out_w, co),
        lambda n, hh, ww, k: inverse[hh % m, ww % m, n * (nh * nw) + (hh // m) * nw + ww // m,
                                     k],
        name="conv2d_winograd", tag="conv2d_winograd_nhwc", attrs={"tile_size": m})
