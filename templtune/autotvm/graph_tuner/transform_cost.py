"""Measure one ``layout_transform`` kernel as ``relay.build`` would run it."""

from __future__ import annotations

from typing import Any

import numpy as np

import templtune
from templtune import te
from templtune.graph.default_schedules import default_schedule
from templtune.graph.op import get_op
from templtune.graph.ops.nchwc import block_of

__all__ = ["measure_transform"]


def _layout_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    n, c, h, w = shape
    b = block_of(layout)
    return (n, c // b, h, w, b) if b else (n, c, h, w)


def measure_transform(shape: tuple[int, ...], src: str, dst: str, target: Any,
                      min_exec_num: int = 100) -> float:
    """Median seconds per call of the ``src -> dst`` transform of an NCHW ``shape`` tensor
    (its default schedule, built for ``target``; rounds of at least ``min_exec_num`` calls
    and at least 20 ms)."""
    data = te.placeholder(_layout_shape(tuple(shape), src), name="p0")
    out = get_op("layout_transform").compute([data], {"src_layout": src, "dst_layout": dst})
    mod = templtune.build(default_schedule([data, out], target), [data, out], target=target,
                          name="layout_transform")
    a = np.random.default_rng(0).standard_normal(_layout_shape(tuple(shape), src)
                                                 ).astype("float32")
    b = np.empty(_layout_shape(tuple(shape), dst), "float32")
    ev = mod.time_evaluator(mod.entry_name, templtune.cpu(), number=max(1, min_exec_num // 10),
                            repeat=5, min_repeat_ms=20)
    return float(np.median(ev(a, b).results))
