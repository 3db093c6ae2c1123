"""Shared fixtures for the cost-model / SA / XGBTuner tests: a synthetic task on a real
ConfigSpace whose 'true' cost is a smooth function of the knob values."""

from __future__ import annotations

import numpy as np

from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from templtune.autotvm.space import ConfigSpace

TARGET = (3, 12, 5, 9)


def make_space(dims=(8, 16, 8, 16)) -> ConfigSpace:
    cfg = ConfigSpace()
    for n, d in enumerate(dims):
        cfg.define_knob(f"k{n}", list(range(d)))
    return cfg


def synthetic_score(knobs, target=TARGET) -> float:
    """Higher is better; unique maximum 1.0 at `target`."""
    k = np.asarray(knobs, dtype=float)
    t = np.asarray(target[: len(k)], dtype=float)
    return float(np.exp(-0.02 * np.sum((k - t) ** 2)))


class SynthTask:
    def __init__(self, name="synth", args=(1,), dims=(8, 16, 8, 16)):
        self.name = name
        self.args = args
        self.target = "llvm"
        self.flop = 1e9
        self.config_space = make_space(dims)

    def instantiate(self, config):  # pragma: no cover - knob features need no lowering
        raise NotImplementedError

    def cost(self, index: int) -> float:
        """Seconds: 1 ms at the optimum, growing away from it."""
        return 1e-3 / synthetic_score(self.config_space.point2knob(index))


def records(task: SynthTask, indices, error_every: int = 0):
    out = []
    for n, i in enumerate(indices):
        cfg = task.config_space.get(int(i))
        if error_every and n % error_every == 0:
            res = MeasureResult((1e9,), MeasureErrorNo.RUNTIME_DEVICE, 0.0, 0.0, "x")
        else:
            res = MeasureResult((task.cost(int(i)),), MeasureErrorNo.NO_ERROR, 0.0, 0.0)
        out.append((MeasureInput(task.target, task, cfg), res))
    return out


# ----------------------------------------------------------------------------- a real template
# Used by test_xgb_recorded.py: its log tests/data/xgb_dense128_random.log was produced by
# running this file (`python tests/test_xgb_fixtures.py`), i.e. by tuning this template with
# RandomTuner and the real LocalBuilder/LocalRunner on the CI machine's CPU.
RECORDED_LOG = "xgb_dense128_random.log"
DENSE_SMALL = "test_xgb/dense_small"
DENSE_SMALL_ARGS = (128, 128, 128)


def _register_dense_small() -> None:
    from templates.tiled_dense import tiled_dense
    from templtune import autotvm
    from templtune.autotvm.task.task import TASK_TABLE

    if DENSE_SMALL in TASK_TABLE:
        return

    @autotvm.template(DENSE_SMALL)
    def dense_small(M, N, K):  # noqa: N803
        return tiled_dense(M, N, K)


_register_dense_small()


def generate_recorded_log(path: str, n_trial: int = 240, seed: int = 0) -> None:
    """Tune DENSE_SMALL with RandomTuner on the real builder/runner, logging to ``path``."""
    from templtune import autotvm
    from templtune.autotvm.callback import log_to_file
    from templtune.autotvm.tuner.index_based import RandomTuner
    from templtune.measure.local_builder import LocalBuilder
    from templtune.measure.local_runner import LocalRunner
    from templtune.measure.measure import measure_option

    task = autotvm.task.create(DENSE_SMALL, args=DENSE_SMALL_ARGS, target="llvm")
    option = measure_option(LocalBuilder(n_parallel=2),
                            LocalRunner(number=5, repeat=3, min_repeat_ms=20))
    RandomTuner(task, seed=seed).tune(n_trial=n_trial, measure_option=option,
                                      callbacks=[log_to_file(path)])


if __name__ == "__main__":
    import os
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data",
                                                             RECORDED_LOG)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    generate_recorded_log(out, int(sys.argv[2]) if len(sys.argv) > 2 else 240)
