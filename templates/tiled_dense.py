"""The tutorial-sized tiled dense template body, shared by the sample-efficiency benchmark's
fallback template and the XGB test fixtures (each registers it under its own name).

Not registered here: a caller wraps :func:`tiled_dense` in ``@autotvm.template(name)``.
"""

from __future__ import annotations

from typing import Any

from templtune import autotvm, te

__all__ = ["tiled_dense"]


def tiled_dense(M: int, N: int, K: int, parallel: bool = False) -> tuple[Any, list]:  # noqa: N803
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` with 3-level tiling of ``i`` and ``j``, a
    2-level split of ``k``, a ``vec`` knob for the innermost loop and, with ``parallel``, the
    outermost loop run in parallel.

    Returns
    -------
    (Schedule, [A, B, C])
    """
    A = te.placeholder((M, K), name="A")  # noqa: N806
    B = te.placeholder((K, N), name="B")  # noqa: N806
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")  # noqa: N806
    s = te.create_schedule(C.op)
    cfg = autotvm.get_config()
    i, j = s[C].op.axis
    cfg.define_split("tile_y", i, num_outputs=3)
    cfg.define_split("tile_x", j, num_outputs=3)
    cfg.define_split("tile_k", k, num_outputs=2)
    cfg.define_knob("vec", [0, 1])
    yo, ym, yi = cfg["tile_y"].apply(s, C, i)
    xo, xm, xi = cfg["tile_x"].apply(s, C, j)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    s[C].reorder(yo, xo, ym, xm, ko, yi, ki, xi)
    if parallel:
        s[C].parallel(yo)
    if cfg["vec"].val:
        s[C].vectorize(xi)
    cfg.add_flop(2 * M * N * K)
    return s, [A, B, C]
