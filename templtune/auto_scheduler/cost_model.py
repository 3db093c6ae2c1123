"""Cost models: RandomModel (tests) and XGBModel (learned, guides the evolutionary search).

NOTE: templtune's XGBModel scores a state from a fixed-length *state feature* vector (per-stage
loop extents by position, annotations, unroll pragma, plus the split lengths of every split
step), not TVM's 164-float per-store features; the training target (normalised throughput
``min_cost / cost`` per workload, weighted by itself) follows TVM.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

from .loop_state import State

logger = logging.getLogger("templtune.auto_scheduler")

_MAX_STAGES, _MAX_ITERS, _MAX_SPLITS = 8, 16, 32


def state_features(state: State) -> np.ndarray:
    """A fixed-length feature vector of a state (log2 scale)."""
    f = np.zeros(_MAX_STAGES * (_MAX_ITERS * 3 + 2) + _MAX_SPLITS * 4, dtype=np.float32)
    comp = [st for st in state.stages if st.op_type == 1][-_MAX_STAGES:]
    w = _MAX_ITERS * 3 + 2
    for si, st in enumerate(comp):
        base = si * w
        f[base] = st.compute_at
        f[base + 1] = math.log2(st.auto_unroll_max_step + 1)
        for ii, it in enumerate(st.iters[-_MAX_ITERS:]):
            f[base + 2 + ii * 3] = math.log2((it.range or 1) + 1)
            f[base + 3 + ii * 3] = it.annotation
            f[base + 4 + ii * 3] = it.iter_kind
    off = _MAX_STAGES * w
    n = 0
    for s in state.transform_steps:
        lens = getattr(s, "lengths", None)
        if isinstance(lens, tuple) and n < _MAX_SPLITS:
            for j, x in enumerate(lens[:4]):
                f[off + n * 4 + j] = math.log2((x or 1) + 1)
            n += 1
    return f


class CostModel:
    """Interface: ``update(inputs, results)``, ``predict(task, states) -> scores``."""

    def update(self, inputs: list, results: list) -> None:
        raise NotImplementedError

    def predict(self, task: Any, states: list[State]) -> np.ndarray:
        raise NotImplementedError


class RandomModel(CostModel):
    """Uniform random scores in [0, 1); ``update`` does nothing."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def update(self, inputs: list, results: list) -> None:
        pass

    def predict(self, task: Any, states: list[State]) -> np.ndarray:
        return self.rng.random(len(states))


class XGBModel(CostModel):
    """XGBoost regression of normalised throughput from state features.

    Parameters follow TVM (``num_warmup_sample``: random scores until more samples were seen;
    ``model_file``: saved after each update).
    """

    def __init__(self, verbose_eval: int = 25, num_warmup_sample: int = 100,
                 seed: int | None = None, model_file: str | None = None,
                 adaptive_training: bool = False) -> None:
        self.params = {"max_depth": 10, "gamma": 0.001, "min_child_weight": 0, "eta": 0.2,
                       "nthread": max(1, (os.cpu_count() or 2) // 2), "verbosity": 0,
                       "seed": seed or 43, "objective": "reg:squarederror"}
        self.num_warmup_sample = num_warmup_sample
        self.model_file = model_file
        self.adaptive_training = adaptive_training
        self.rng = np.random.default_rng(seed or 43)
        self.xs: list[np.ndarray] = []
        self.costs: list[float] = []
        self.keys: list[str] = []
        self.bst: Any = None
        self.last_train_length = 0

    def _add(self, key: str, x: np.ndarray, cost: float) -> None:
        self.keys.append(key)
        self.xs.append(x)
        self.costs.append(cost)

    def update(self, inputs: list, results: list) -> None:
        for inp, res in zip(inputs, results):
            state = inp.state
            if not hasattr(state, "stages"):
                dag = getattr(inp.task, "compute_dag", None)
                if dag is None:
                    continue
                state = dag.replay(state.transform_steps)
            cost = res.mean_cost if res.error_no == 0 else 1e10
            self._add(inp.task.workload_key, state_features(state), cost)
        if self.adaptive_training and len(self.xs) - self.last_train_length < \
                self.last_train_length / 5:
            return
        self._train()

    def _labels(self) -> np.ndarray:
        best: dict[str, float] = {}
        for k, c in zip(self.keys, self.costs):
            best[k] = min(best.get(k, 1e30), c)
        return np.array([best[k] / c for k, c in zip(self.keys, self.costs)], dtype=np.float32)

    def _train(self) -> None:
        import xgboost as xgb

        if len(self.xs) < 2:
            return
        y = self._labels()
        d = xgb.DMatrix(np.stack(self.xs), label=y, weight=np.maximum(y, 1e-3))
        self.bst = xgb.train(self.params, d, num_boost_round=200)
        self.last_train_length = len(self.xs)
        if self.model_file:
            self.save(self.model_file)

    def predict(self, task: Any, states: list[State]) -> np.ndarray:
        if self.bst is None or len(self.xs) <= self.num_warmup_sample:
            return self.rng.random(len(states))
        import xgboost as xgb

        x = np.stack([state_features(s) for s in states])
        return self.bst.predict(xgb.DMatrix(x))

    def update_from_file(self, file_name: str, n_lines: int | None = None) -> None:
        """Pre-train from a record log (records whose workload is registered)."""
        from .compute_dag import ComputeDAG
        from .measure_record import RecordReader

        inputs, results = RecordReader(file_name).read_lines(n_lines)
        dags: dict[str, Any] = {}
        for inp, res in zip(inputs, results):
            key = inp.task.workload_key
            if key not in dags:
                try:
                    dags[key] = ComputeDAG(key)
                except Exception:  # noqa: BLE001 - unknown workload: skip its records
                    dags[key] = None
            dag = dags[key]
            if dag is None:
                continue
            try:
                state = dag.replay(inp.state.transform_steps)
            except Exception:  # noqa: BLE001
                continue
            self._add(key, state_features(state), res.mean_cost if res.error_no == 0 else 1e10)
        self._train()

    def save(self, file_name: str) -> None:
        if self.bst is not None:
            self.bst.save_model(file_name)

    def load(self, file_name: str) -> None:
        import xgboost as xgb

        self.bst = xgb.Booster(params=self.params)
        self.bst.load_model(file_name)
        self.num_warmup_sample = -1
