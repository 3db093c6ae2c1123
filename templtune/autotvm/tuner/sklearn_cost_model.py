"""scikit-learn cost models (gradient boosting, random forest) behind the CostModel interface."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..feature.extract import FeatureExtractor
from .xgboost_cost_model import FeatureCostModel

ESTIMATORS = ("gbr", "rf")


def _sklearn(module: str) -> Any:
    """Import ``sklearn.<module>``; scikit-learn is an optional extra."""
    import importlib

    try:
        return importlib.import_module(f"sklearn.{module}")
    except ImportError as exc:
        raise ImportError("SklearnCostModel needs scikit-learn, an optional dependency: "
                          "pip install 'templtune[sklearn]' (or use the default "
                          f"XGBoostCostModel) ({exc})") from exc


class SklearnCostModel(FeatureCostModel):
    """A regression cost model from scikit-learn, a drop-in replacement for
    :class:`~templtune.autotvm.tuner.XGBoostCostModel` in :class:`ModelBasedTuner`.

    Parameters
    ----------
    task : Task
        The task whose configs are scored.
    feature_type : str
        ``"itervar"`` (default), ``"knob"`` or ``"curve"``.
    estimator : str or sklearn regressor
        ``"gbr"`` (``GradientBoostingRegressor``, depth 3, 200 trees), ``"rf"``
        (``RandomForestRegressor``, 200 trees), or any unfitted regressor with
        ``fit``/``predict`` (cloned for each fit).
    num_threads : int or None
        ``n_jobs`` for the random forest.
    n_workers : int or None
        Feature-extraction processes.
    seed : int or None
        Seed of the shuffle and of the estimator.

    Notes
    -----
    A base model (transfer learning) is used as an offset: the estimator fits the residual
    ``y - discount * base(x)`` and predictions add the offset back. ``plan_size``, rounds and
    patience are ignored (no early stopping); ``output_margin`` has no effect.
    """

    def __init__(self, task: Any, feature_type: str = "itervar", estimator: Any = "gbr",
                 num_threads: int | None = None, log_interval: int = 25,
                 n_workers: int | None = None, seed: int | np.random.Generator | None = None,
                 extractor: FeatureExtractor | None = None) -> None:
        if isinstance(estimator, str) and estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS} or a regressor")
        _sklearn("base")  # fail at construction, not at the first fit, when it is missing
        super().__init__(task, feature_type, num_threads, log_interval, n_workers, seed,
                         extractor)
        self.estimator = estimator
        self.model: Any = None

    def _make(self) -> Any:
        seed = int(self.rng.integers(2**31))
        if self.estimator == "gbr":
            return _sklearn("ensemble").GradientBoostingRegressor(
                n_estimators=200, max_depth=3, learning_rate=0.1, subsample=0.8,
                random_state=seed)
        if self.estimator == "rf":
            return _sklearn("ensemble").RandomForestRegressor(
                n_estimators=200, min_samples_leaf=2, n_jobs=self.num_threads,
                random_state=seed)
        return _sklearn("base").clone(self.estimator)

    def _train(self, x: np.ndarray, y: np.ndarray, margin: np.ndarray | None, plan_size: int,
               rounds: int, patience: int) -> None:
        target = y if margin is None else y - margin
        self.model = self._make()
        self.model.fit(x, target)

    def _predict_raw(self, x: np.ndarray, output_margin: bool) -> np.ndarray:
        return np.asarray(self.model.predict(x), dtype=float)

    def _spawn(self) -> SklearnCostModel:
        return SklearnCostModel(self.task, self.feature_type, self.estimator, self.num_threads,
                                self.log_interval, self.n_workers,
                                seed=int(self.rng.integers(2**31)), extractor=self.extractor)
