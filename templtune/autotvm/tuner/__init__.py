"""AutoTVM-style tuners: grid search, random search, genetic algorithm, and model-based ones
(``XGBTuner``, ``ModelBasedTuner``; imported lazily so that xgboost loads only when used).

Every tuner registers its short name in :data:`TUNERS` (see :mod:`.registry`)."""

from __future__ import annotations

import importlib
from typing import Any

from .ga_tuner import GATuner
from .index_based import GridSearchTuner, IndexBaseTuner, RandomTuner
from .registry import TUNERS, TunerInfo, load_tuners, register_tuner
from .tuner import Tuner

_LAZY = {
    "XGBTuner": "templtune.autotvm.tuner.xgboost_tuner",
    "ModelBasedTuner": "templtune.autotvm.tuner.model_based_tuner",
    "CostModel": "templtune.autotvm.tuner.model_based_tuner",
    "ModelOptimizer": "templtune.autotvm.tuner.model_based_tuner",
    "XGBoostCostModel": "templtune.autotvm.tuner.xgboost_cost_model",
    "SklearnCostModel": "templtune.autotvm.tuner.sklearn_cost_model",
    "SimulatedAnnealingOptimizer": "templtune.autotvm.tuner.sa_model_optimizer",
}

__all__ = ["GATuner", "GridSearchTuner", "IndexBaseTuner", "RandomTuner", "Tuner", "TUNERS",
           "TunerInfo", "load_tuners", "register_tuner", *_LAZY]


def __getattr__(name: str) -> Any:
    if name == "callback":  # TVM's module path of the callbacks (autotvm.tuner.callback)
        return importlib.import_module(f"{__name__}.callback")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
