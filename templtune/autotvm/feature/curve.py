"""Curve features: per buffer, how count/reuse/topdown grow along the loop chain around it.

For every raw buffer name (the access suffix ``_k`` and any ``.scope`` suffix removed), the deepest
access of that buffer is chosen (the last one visited wins ties). Along the loops around it,
outermost to innermost, each loop ``L`` gives a point ``(count, reuse, topdown)`` (see
:mod:`.itervar`). Four curves are built from these points in log2 space: reuse→count,
count→reuse, count→topdown and topdown→count; each is sorted by x and gets a leading (0, 0) point.
Each curve is sampled as a step function at x = 0, 1, …, ``sample_n``−1, emitting
``(y_j, x − x_j)`` with j the last point whose x_j ≤ x.

The length is ``sample_n × n_buffers × 4 × 2`` (a GEMM with 30 samples gives 720).

Deviation from TVM: TVM keeps only buffers at the single deepest nest level of the function;
here every buffer contributes its own deepest access, so the number of buffers (hence the length)
does not depend on the schedule.
"""

from __future__ import annotations

import math

import numpy as np

from templtune.autotvm.feature.itervar import touch_stats
from templtune.autotvm.feature.loops import AccessInfo, LoopSummary

DEFAULT_SAMPLE_N = 30


def raw_buffer_name(name: str) -> str:
    """``"A.shared"`` → ``"A"``; ``"C.local"`` → ``"C"``."""
    return name.split(".", 1)[0]


def innermost_accesses(summary: LoopSummary) -> list[AccessInfo]:
    """One access per raw buffer name: its deepest, the last visited on ties; sorted by name."""
    best: dict[str, AccessInfo] = {}
    for acc in summary.accesses:
        key = raw_buffer_name(acc.buffer)
        cur = best.get(key)
        if cur is None or len(acc.loops) >= len(cur.loops):
            best[key] = acc
    return [best[k] for k in sorted(best)]


def _sample(xs: list[float], ys: list[float], sample_n: int) -> list[float]:
    pts = sorted(zip(xs, ys))
    pts.insert(0, (0.0, 0.0))
    out: list[float] = []
    j = 0
    for x in range(sample_n):
        while j + 1 < len(pts) and pts[j + 1][0] <= x:
            j += 1
        out += [pts[j][1], x - pts[j][0]]
    return out


def curve_feature(summary: LoopSummary, sample_n: int = DEFAULT_SAMPLE_N) -> np.ndarray:
    """The flat curve feature vector of length ``sample_n * n_buffers * 8``."""
    out: list[float] = []
    for acc in innermost_accesses(summary):
        counts: list[float] = []
        reuses: list[float] = []
        tops: list[float] = []
        for p, lp in enumerate(acc.loops):
            count, reuse, _, _ = touch_stats(acc, acc.loops[p:])
            counts.append(math.log2(count))
            reuses.append(math.log2(reuse))
            tops.append(math.log2(lp.topdown))
        out += _sample(reuses, counts, sample_n)
        out += _sample(counts, reuses, sample_n)
        out += _sample(counts, tops, sample_n)
        out += _sample(tops, counts, sample_n)
    return np.asarray(out, dtype=np.float32)
