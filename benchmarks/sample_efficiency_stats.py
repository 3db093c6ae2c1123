"""Statistics of the sample-efficiency benchmark: what Random search needs, in expectation.

Random search draws configs uniformly *without replacement*. If ``k`` of the ``n`` configs of a
space are "good" (e.g. within 90% of the optimum), the number of draws until the first good one
has expectation ``(n + 1) / (k + 1)`` (the first of ``k`` marked items in a random permutation of
``n``). With an exhaustively measured space ``k`` is known exactly; otherwise the fraction
``q = k / n`` is estimated from uniformly sampled configs, with a one-sided Clopper-Pearson
upper bound (zero hits in ``m`` samples gives ``q < 1 - 0.05^(1/m) ~ 3/m`` at 95%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def expected_random_trials(n: int, k: int) -> float:
    """Expected uniform draws without replacement from ``n`` items until one of ``k`` marked
    ones is drawn: ``(n + 1) / (k + 1)`` (``inf`` when ``k == 0``)."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    return math.inf if k == 0 else (n + 1) / (k + 1)


def prob_random_within(n: int, k: int, t: int) -> float:
    """Probability that ``t`` uniform draws without replacement from ``n`` items include at
    least one of ``k`` marked ones: ``1 - C(n-k, t) / C(n, t)``."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    t = max(0, min(int(t), n))
    if t > n - k:
        return 1.0
    # NOTE: a product of t ratios, not math.comb: C(3844, 400) overflows a float.
    log_miss = sum(math.log((n - k - j) / (n - j)) for j in range(t))
    return 1.0 - math.exp(log_miss)


def q_upper_bound(hits: int, m: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a proportion seen ``hits`` times in ``m``
    uniform samples (``1 - (1 - confidence)^(1/m)`` for zero hits, about ``3/m`` at 95%)."""
    if m <= 0 or not 0 <= hits <= m:
        raise ValueError(f"need 0 <= hits <= m and m > 0, got hits={hits}, m={m}")
    if hits == m:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, hits + 1, m - hits))


def trials_to_reach(curve: Sequence[float], threshold: float) -> int | None:
    """1-based trial at which ``curve`` (per-trial scores) first reaches ``threshold``
    (None if never)."""
    hit = np.flatnonzero(np.asarray(curve, dtype=float) >= threshold)
    return int(hit[0]) + 1 if len(hit) else None


def censored_summary(trials: Sequence[int | None], limit: int) -> dict[str, float]:
    """Summary of per-seed trials-to-target where ``None`` means "not within ``limit``".

    ``median`` counts censored seeds as ``inf`` (so it is ``inf`` when half or more never got
    there); ``mean_lower`` counts them as ``limit + 1`` (a lower bound on the true mean)."""
    vals = np.asarray([math.inf if t is None else float(t) for t in trials])
    if len(vals) == 0:
        raise ValueError("no seeds")
    reached = vals[np.isfinite(vals)]
    return {"seeds": float(len(vals)), "reached": float(len(reached)),
            "median": float(np.median(vals)),
            "mean_lower": float(np.mean(np.where(np.isfinite(vals), vals, limit + 1)))}
