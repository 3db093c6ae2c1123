"""Metrics for judging cost models and tuning curves.

All functions take plain sequences / numpy arrays and return numpy arrays or floats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def max_curve(trial_scores: Sequence[float]) -> np.ndarray:
    """Best score so far after each trial."""
    return np.maximum.accumulate(np.asarray(trial_scores, dtype=float))


def mean_curve(trial_scores: Sequence[float]) -> np.ndarray:
    """Mean score so far after each trial."""
    s = np.asarray(trial_scores, dtype=float)
    return np.cumsum(s) / np.arange(1, len(s) + 1)


def recall_curve(trial_ranks: Sequence[int] | np.ndarray, top: int | None = None) -> np.ndarray:
    """``curve[i]``: fraction of the true top-``n`` (``n = top`` or ``i+1``) configs among the
    first ``i+1`` trials. ``trial_ranks`` are the true ranks (0 = best) in trial order."""
    ranks = np.asarray(trial_ranks)
    n = len(ranks)
    out = np.zeros(n)
    if n == 0:
        return out
    seen = 0
    if top is None:
        found = np.zeros(n, dtype=bool)
        for i, r in enumerate(ranks):
            if 0 <= r < n:
                found[r] = True
            # NOTE: count of ranks < i+1 seen so far, updated incrementally.
            seen = int(found[: i + 1].sum())
            out[i] = seen / (i + 1)
        return out
    for i, r in enumerate(ranks):
        if r < top:
            seen += 1
        out[i] = seen / top
    return out


def cover_curve(trial_ranks: Sequence[int]) -> np.ndarray:
    """``curve[i]``: size of the prefix ``0..k`` of true ranks fully covered by the first
    ``i+1`` trials, divided by ``i+1``."""
    ranks = np.asarray(trial_ranks)
    out = np.zeros(len(ranks))
    covered = set()
    k = 0
    for i, r in enumerate(ranks):
        covered.add(int(r))
        while k in covered:
            k += 1
        out[i] = k / (i + 1)
    return out


def true_ranks(labels: np.ndarray) -> np.ndarray:
    """Rank of every element when sorted by descending label (0 = best; ties by position)."""
    order = np.argsort(-np.asarray(labels, dtype=float), kind="stable")
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return ranks


def average_recall(preds: np.ndarray, labels: np.ndarray, n: int) -> float:
    """Average recall at ``n``: trials ordered by descending prediction; the mean over
    ``k = 1..n`` of the fraction of the first ``k`` trials whose true rank is < ``k``."""
    preds = np.asarray(preds, dtype=float)
    n = min(n, len(preds))
    if n == 0:
        return 0.0
    trials = np.argsort(-preds, kind="stable")[:n]
    ranks = true_ranks(labels)[trials]
    return float(np.mean(recall_curve(ranks)[:n]))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties sharing their average rank."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    ranks = np.empty(len(x), dtype=float)
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i: j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation of ``a`` and ``b`` (0.0 when either is constant)."""
    ra = _average_ranks(np.asarray(a, dtype=float))
    rb = _average_ranks(np.asarray(b, dtype=float))
    ra -= ra.mean()
    rb -= rb.mean()
    den = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def top_k_hit_rate(preds: Sequence[float], labels: Sequence[float], k: int) -> float:
    """Fraction of the true top-``k`` found among the predicted top-``k``."""
    p = np.argsort(-np.asarray(preds, dtype=float), kind="stable")[:k]
    t = np.argsort(-np.asarray(labels, dtype=float), kind="stable")[:k]
    return len(set(p.tolist()) & set(t.tolist())) / max(1, min(k, len(t)))
