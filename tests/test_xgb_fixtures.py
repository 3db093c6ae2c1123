"""Shared fixtures for the cost-model / SA / XGBTuner tests: a synthetic task on a real
ConfigSpace whose 'true' cost is a smooth function of the knob values."""

from __future__ import annotations

import numpy as np

from templtune.autotvm.measure.measure import MeasureErrorNo, MeasureInput, MeasureResult
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
