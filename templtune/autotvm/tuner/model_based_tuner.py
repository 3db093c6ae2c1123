"""Model-based tuning: a learned cost model ranks configs, a model optimizer finds the best-ranked
unvisited ones, and the tuner measures them (with ε-greedy random picks).

The three parts are separate and swappable:

* :class:`CostModel` – ``fit(xs, ys, plan_size)``, ``fit_log(records, plan_size)``,
  ``predict(xs)``, ``spawn_base_model()`` / ``load_basemodel(base)`` (transfer learning),
  ``clone()``, ``close()``;
* :class:`ModelOptimizer` – ``find_maximums(model, num, exclusive) -> list[int]``;
* :class:`ModelBasedTuner` – the plan / ε-greedy / diversity-filter logic.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..measure import MeasureInput, MeasureResult
from .index_based import RandomIndexSampler, space_is_valid
from .tuner import Tuner

logger = logging.getLogger("templtune.tuner")


class CostModel(abc.ABC):
    """Predicts a score (higher is better) for config indices of one task."""

    @abc.abstractmethod
    def fit(self, xs: Sequence[int], ys: Sequence[float], plan_size: int) -> None:
        """Train on measured config indices ``xs`` with throughputs ``ys`` (0 for failures)."""

    @abc.abstractmethod
    def fit_log(self, records: Iterable[tuple[MeasureInput, MeasureResult]], plan_size: int,
                min_seed_records: int = 500) -> bool:
        """Train on log records (possibly of other workloads of the same template). Returns False
        (and stays untrained) when fewer than ``min_seed_records`` usable records exist."""

    @abc.abstractmethod
    def predict(self, xs: Sequence[int], output_margin: bool = False) -> np.ndarray:
        """Scores of config indices ``xs`` (higher = predicted faster)."""

    @abc.abstractmethod
    def spawn_base_model(self) -> CostModel:
        """A fresh, untrained model of the same configuration (sharing feature caches)."""

    @abc.abstractmethod
    def load_basemodel(self, base_model: CostModel) -> None:
        """Attach a trained base model whose predictions seed this one (transfer learning)."""

    def clone(self) -> CostModel:
        """A fresh, untrained model of the same configuration."""
        return self.spawn_base_model()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release worker processes (re-created on demand)."""


class ModelOptimizer(abc.ABC):
    """Searches the config space for the indices a cost model scores highest."""

    @abc.abstractmethod
    def find_maximums(self, model: CostModel, num: int, exclusive: set[int]) -> list[int]:
        """Up to ``num`` distinct indices not in ``exclusive``, best predicted first."""


def submodular_pick(scores: np.ndarray, knobs: Sequence[Sequence[int]], n_pick: int,
                    knob_weight: float = 1.0) -> list[int]:
    """Greedily pick ``n_pick`` items maximising score plus knob-value coverage.

    The gain of an item is its score plus ``knob_weight`` for every knob value (per dimension)
    that no picked item has yet. Returns positions into ``scores``/``knobs``.
    """
    n = len(scores)
    n_pick = min(n_pick, n)
    if n_pick == 0:
        return []
    dims = len(knobs[0]) if n else 0
    covered: list[set[int]] = [set() for _ in range(dims)]
    remain = list(range(n))
    picked: list[int] = []
    for _ in range(n_pick):
        best_j, best_gain = 0, -np.inf
        for j, item in enumerate(remain):
            gain = float(scores[item]) + knob_weight * sum(
                1 for d in range(dims) if knobs[item][d] not in covered[d])
            if gain > best_gain:
                best_j, best_gain = j, gain
        item = remain.pop(best_j)
        picked.append(item)
        for d in range(dims):
            covered[d].add(knobs[item][d])
    return picked


class ModelBasedTuner(Tuner):
    """A tuner that measures the maxima of a cost model, re-planning every ``plan_size`` trials.

    Parameters
    ----------
    task : Task
        The task to tune.
    cost_model : CostModel
        The model that scores configs.
    model_optimizer : ModelOptimizer
        Finds the best-scored unvisited configs.
    plan_size : int
        Trials between re-trainings; also the size of each plan. The last ``int(0.05*plan_size)``
        slots of every plan are uniform random picks (ε-greedy), as are all picks before the
        first plan.
    diversity_filter_ratio : float or None
        If given (≥ 1), take ``plan_size * ratio`` maxima and keep the ``plan_size`` that balance
        predicted score and knob diversity.
    seed : int, numpy.random.Generator or None
        Seed of the random picks.

    Notes
    -----
    Deviation from AutoTVM (§9 item 5 of the spec): AutoTVM's diversity filter multiplies the
    model scores by 0, so its plan ignores the model. Here the scores, rescaled to [0, 1], are kept
    and each newly covered knob value adds ``1 / n_knobs``: score and diversity both count.

    ``load_history`` also replays this task's own records through :meth:`update` (so a resumed
    tuner trains on what it measured before) and trains a base model on all records of the
    same template name (transfer learning) when there are at least ``min_seed_records``.
    """

    def __init__(self, task: Any, cost_model: CostModel, model_optimizer: ModelOptimizer,
                 plan_size: int, diversity_filter_ratio: float | None = None,
                 seed: int | np.random.Generator | None = None, **kwargs: Any) -> None:
        super().__init__(task, seed=seed, **kwargs)
        if diversity_filter_ratio is not None and diversity_filter_ratio < 1:
            raise ValueError(f"diversity_filter_ratio must be >= 1, got {diversity_filter_ratio}")
        self.cost_model = cost_model
        self.model_optimizer = model_optimizer
        self.plan_size = int(plan_size)
        self.diversity_filter_ratio = diversity_filter_ratio
        self.trials: list[int] = []
        self.trial_pt = 0
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.flops_max = 0.0
        self.train_ct = 0
        #: per re-planning round: seconds of feature extraction, model fit and optimizer search
        self.round_stats: list[dict[str, float]] = []
        self._sampler = RandomIndexSampler(self.space, 0, self.space.range_length, self.rng)

    # ------------------------------------------------------------------ proposal
    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, batch_size: int) -> list:
        ret = []
        n_random_tail = int(0.05 * self.plan_size)
        while len(ret) < batch_size and self.has_next():
            index: int | None = None
            while self.trial_pt < len(self.trials):
                cand = self.trials[self.trial_pt]
                if cand not in self.visited and space_is_valid(self.space, cand):
                    index = cand
                    break
                self.trial_pt += 1
            if self.trial_pt >= len(self.trials) - n_random_tail:
                # ε-greedy: no plan, the plan is used up, or its last 5% slots
                index = self._sampler.draw(self.visited)
            if index is None:
                break
            self.visited.add(index)
            ret.append(self.space.get(index))
        return ret

    # ------------------------------------------------------------------ learning
    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for inp, res in zip(inputs, results):
            index = int(inp.config.index)
            flops = self._flops(res) if res.ok else 0.0
            self.flops_max = max(self.flops_max, flops)
            self.xs.append(index)
            self.ys.append(flops)
            self.visited.add(index)
        if len(self.xs) >= self.plan_size * (self.train_ct + 1) and self.flops_max > 1e-6:
            t0, e0 = time.perf_counter(), self._extract_seconds()
            self.cost_model.fit(self.xs, self.ys, self.plan_size)
            t1, e1 = time.perf_counter(), self._extract_seconds()
            self.trials = self._plan(self.cost_model)
            t2, e2 = time.perf_counter(), self._extract_seconds()
            self.round_stats.append({
                "trials": float(len(self.xs)), "extract": e2 - e0,
                "fit": (t1 - t0) - (e1 - e0), "optimize": (t2 - t1) - (e2 - e1)})
            self.trial_pt = 0
            self.train_ct += 1

    def _extract_seconds(self) -> float:
        ext = getattr(self.cost_model, "extractor", None)
        return float(getattr(ext, "seconds", 0.0))

    def _plan(self, model: CostModel) -> list[int]:
        if not self.diversity_filter_ratio:
            return list(self.model_optimizer.find_maximums(model, self.plan_size, self.visited))
        n_cand = int(self.plan_size * self.diversity_filter_ratio)
        cands = list(self.model_optimizer.find_maximums(model, n_cand, self.visited))
        if not cands:
            return []
        scores = np.asarray(model.predict(cands), dtype=float)
        span = scores.max() - scores.min()
        scores = (scores - scores.min()) / span if span > 0 else np.zeros_like(scores)
        knobs = [self.space.point2knob(c) for c in cands]
        weight = 1.0 / max(1, len(knobs[0]))
        return [cands[p] for p in submodular_pick(scores, knobs, self.plan_size, weight)]

    def load_history(self, data_set: Iterable[tuple[MeasureInput, MeasureResult]],
                     min_seed_records: int = 500) -> None:
        """Resume from this task's records and pre-train on all records of this template.

        Records of this task are replayed through :meth:`update` (marking them visited).
        Then a base model is trained on every record with this task's template name
        (``CostModel.fit_log``); if it trains (≥ ``min_seed_records`` records), it seeds the
        first plan and is attached to the cost model (transfer learning).
        """
        data = list(data_set)
        own = [(inp, res) for inp, res in data if self._same_task(inp)]
        for inp, res in own:
            self._track_best(inp, res, self.best_iter)
        if own:
            self.update([p[0] for p in own], [p[1] for p in own])
        base_model = self.cost_model.spawn_base_model()
        if not base_model.fit_log(data, self.plan_size, min_seed_records):
            return
        if not self.trials:
            self.trials = list(self.model_optimizer.find_maximums(
                base_model, self.plan_size, self.visited))
            self.trial_pt = 0
        self.cost_model.load_basemodel(base_model)

    def tune(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102 - see Tuner.tune
        try:
            super().tune(*args, **kwargs)
        finally:
            self.cost_model.close()

    tune.__doc__ = Tuner.tune.__doc__
