"""Cost models: RandomModel (tests) and XGBModel (learned, guides the evolutionary search).

``XGBModel`` follows Ansor: every state is described by its per-store feature rows
(:mod:`.feature`), one xgboost regressor scores rows, and the score of a state is the *sum* of
its rows' scores ("pack-sum"). Training minimises the squared error of those sums against the
normalised throughput ``min cost of the workload / cost`` with a custom objective (gradient
``sum - y`` and hessian 1 on every row of a state, both times the state's weight), each state
weighted by its label so that good programs count more; it stops early on the pack-sum RMSE.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .feature import (
    get_per_store_features_from_measure_pairs,
    get_per_store_features_from_states,
)
from .loop_state import State

logger = logging.getLogger("auto_scheduler")

#: Training stops after this many rounds, or earlier when the pack-sum RMSE has not improved
#: by ``_MIN_DELTA`` for ``_EARLY_STOP`` rounds.
MAX_ROUNDS, _EARLY_STOP, _MIN_DELTA = 400, 50, 1e-4


class CostModel:
    """Interface: ``update(inputs, results)``, ``predict(task, states) -> scores``."""

    def update(self, inputs: list, results: list) -> None:
        raise NotImplementedError

    def predict(self, task: Any, states: list[State]) -> np.ndarray:
        raise NotImplementedError

    @property
    def warming_up(self) -> bool:
        """Whether the scores are still uninformed (random) until more samples arrive."""
        return False


class RandomModel(CostModel):
    """Uniform random scores in [0, 1); ``update`` does nothing."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def update(self, inputs: list, results: list) -> None:
        pass

    def predict(self, task: Any, states: list[State]) -> np.ndarray:
        return self.rng.random(len(states))


def _pack(xs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-state row blocks; return the rows and each row's state index."""
    sizes = np.array([len(x) for x in xs], dtype=np.int64)
    rows = np.concatenate(list(xs)) if len(xs) else np.zeros((0, 0), np.float32)
    return rows, np.repeat(np.arange(len(xs)), sizes)


def pack_sum_objective(group: np.ndarray, y: np.ndarray, w: np.ndarray) -> Any:
    """An xgboost custom objective: squared error of per-state sums of row predictions.

    ``group[r]`` is the state of row ``r``; ``y``/``w`` are the per-state label and weight.
    """
    n = len(y)

    def obj(preds: np.ndarray, dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
        sums = np.bincount(group, weights=preds, minlength=n)
        ww = w[group]
        return (sums[group] - y[group]) * ww, ww

    return obj


def pack_sum_rmse(group: np.ndarray, y: np.ndarray, w: np.ndarray) -> Any:
    """An xgboost custom metric ``p-rmse``: weighted RMSE of the per-state sums."""
    n = len(y)

    def metric(preds: np.ndarray, dtrain: Any) -> tuple[str, float]:
        sums = np.bincount(group, weights=preds, minlength=n)
        return "p-rmse", float(np.sqrt(np.sum(w * (sums - y) ** 2) / max(np.sum(w), 1e-12)))

    return metric


class XGBModel(CostModel):
    """XGBoost pack-sum regression of normalised throughput from per-store features.

    Parameters
    ----------
    verbose_eval : int
        Log the training metric every this many rounds (at debug level).
    num_warmup_sample : int
        ``predict`` returns random scores until more samples than this have been seen.
    seed : int, optional
        Seed of xgboost and of the warm-up scores (43 when None, as TVM).
    model_file : str, optional
        Saved after each training.
    adaptive_training : bool
        Skip a retraining when fewer than a fifth of the previous training size is new.
    """

    def __init__(self, verbose_eval: int = 25, num_warmup_sample: int = 100,
                 seed: int | None = None, model_file: str | None = None,
                 adaptive_training: bool = False) -> None:
        self.params = {"max_depth": 10, "gamma": 0.001, "min_child_weight": 0, "eta": 0.2,
                       "nthread": max(1, (os.cpu_count() or 2) // 2), "verbosity": 0,
                       "seed": seed or 43, "disable_default_eval_metric": 1,
                       "base_score": 0.0}
        self.verbose_eval = verbose_eval
        self.num_warmup_sample = num_warmup_sample
        self.model_file = model_file
        self.adaptive_training = adaptive_training
        self.rng = np.random.default_rng(seed or 43)
        self.xs: list[np.ndarray] = []  # per measured state: its (n_stores, F) rows
        self.costs: list[float] = []
        self.keys: list[str] = []
        self.bst: Any = None
        self.last_train_length = 0

    # ---- data ------------------------------------------------------------------------------
    def _add_pairs(self, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        from .measure import MAX_FLOAT
        from .measure_record import usable_cost

        feats, _, _ = get_per_store_features_from_measure_pairs(inputs, results)
        for inp, res, x in zip(inputs, results, feats):
            self.keys.append(inp.task.workload_key)
            self.xs.append(x)
            cost = usable_cost(res)  # a logged NaN/zero/negative cost counts as a failure
            self.costs.append(MAX_FLOAT if cost is None else cost)

    def _labels(self) -> np.ndarray:
        best: dict[str, float] = {}
        for k, c in zip(self.keys, self.costs):
            best[k] = min(best.get(k, 1e30), c)
        return np.array([best[k] / c for k, c in zip(self.keys, self.costs)], dtype=np.float64)

    def update(self, inputs: list, results: list) -> None:
        """Add measured pairs and retrain (from scratch, on all data)."""
        self._add_pairs(inputs, results)
        if self.adaptive_training and len(self.xs) - self.last_train_length < \
                self.last_train_length / 5:
            return
        self._train()

    def update_from_file(self, file_name: str, n_lines: int | None = None) -> None:
        """Pre-train from a record log (records whose workload is registered)."""
        from .measure_record import RecordReader

        inputs, results = RecordReader(file_name).read_lines(n_lines)
        self._add_pairs(inputs, results)
        self._train()

    # ---- training --------------------------------------------------------------------------
    def _train(self) -> None:
        import xgboost as xgb

        keep = [k for k, x in enumerate(self.xs) if len(x)]
        if len(keep) < 2:
            return
        y = self._labels()[keep]
        # NOTE: weight = label (TVM): a failed or slow program barely pulls the model; the
        # floor keeps it from being ignored entirely.
        w = np.maximum(y, 1e-3)
        rows, group = _pack([self.xs[k] for k in keep])
        d = xgb.DMatrix(rows)
        self.bst = xgb.train(
            self.params, d, num_boost_round=MAX_ROUNDS, evals=[(d, "tr")],
            obj=pack_sum_objective(group, y, w), custom_metric=pack_sum_rmse(group, y, w),
            verbose_eval=False, callbacks=[xgb.callback.EarlyStopping(
                rounds=_EARLY_STOP, metric_name="p-rmse", data_name="tr",
                min_delta=_MIN_DELTA, save_best=True)])
        self.last_train_length = len(self.xs)
        logger.debug("XGBModel: trained on %d states (%d rows), %d rounds", len(keep),
                     len(rows), self.bst.num_boosted_rounds())
        if self.model_file:
            self.save(self.model_file)

    # ---- prediction ------------------------------------------------------------------------
    @property
    def warming_up(self) -> bool:
        return self.bst is None or len(self.xs) <= self.num_warmup_sample

    def predict(self, task: Any, states: list[State]) -> np.ndarray:
        """Scores of ``states`` (higher is better); ``-inf`` for a state that does not lower,
        random in [0, 1) while the model has seen ``num_warmup_sample`` samples or fewer."""
        if self.warming_up:
            return self.rng.random(len(states))
        return self.predict_features(get_per_store_features_from_states(states, task))

    def predict_features(self, xs: Sequence[np.ndarray]) -> np.ndarray:
        """Pack-sum scores of per-state feature blocks (``-inf`` for an empty block)."""
        out = np.full(len(xs), -np.inf)
        if self.bst is None:
            raise RuntimeError("XGBModel.predict_features: the model is not trained")
        nonempty = [k for k, x in enumerate(xs) if len(x)]
        if nonempty:
            rows, group = _pack([xs[k] for k in nonempty])
            preds = self.bst.inplace_predict(rows)
            out[nonempty] = np.bincount(group, weights=preds, minlength=len(nonempty))
        return out

    # ---- persistence -----------------------------------------------------------------------
    def save(self, file_name: str) -> None:
        if self.bst is not None:
            self.bst.save_model(file_name)

    def load(self, file_name: str) -> None:
        import xgboost as xgb

        self.bst = xgb.Booster(params=self.params)
        self.bst.load_model(file_name)
        self.num_warmup_sample = -1
