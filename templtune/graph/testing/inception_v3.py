"""Inception v3 (Szegedy et al. 2015), the block structure of Relay's model zoo, with folded
batch-norm. Deviations: the average pools inside the blocks exclude padding from the mean, and
the final 8x8 average pool is a global one (the same at 299x299; valid for smaller images)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function
from .common import _Builder, _data


class _Net:
    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.n = 0

    def conv(self, x: Expr, cout: int, k: Any = 1, stride: int = 1, pad: Any = 0) -> Call:
        self.n += 1
        cin = int(x.shape[1])
        return self.b.conv(x, f"conv{self.n}", cin, cout, k, stride, pad)

    def pool(self, x: Expr, kind: str, stride: int, pad: int) -> Call:
        f = nn.max_pool2d if kind == "max" else nn.avg_pool2d
        return f(x, pool_size=3, strides=stride, padding=pad)

    def block_a(self, x: Expr, n1: int, r3: int, a3: int, b3: int, r5: int, n5: int,
                proj: int) -> Call:
        t1 = self.conv(x, n1)
        t5 = self.conv(self.conv(x, r5), n5, 5, pad=2)
        t3 = self.conv(self.conv(self.conv(x, r3), a3, 3, pad=1), b3, 3, pad=1)
        tp = self.conv(self.pool(x, "avg", 1, 1), proj)
        return nn.concatenate([t1, t5, t3, tp], axis=1)

    def block_b(self, x: Expr, n3: int, r: int, a: int, c: int) -> Call:
        t3 = self.conv(x, n3, 3, stride=2)
        td = self.conv(self.conv(self.conv(x, r), a, 3, pad=1), c, 3, stride=2)
        return nn.concatenate([t3, td, self.pool(x, "max", 2, 0)], axis=1)

    def block_c(self, x: Expr, n1: int, d: tuple[int, int, int], q: tuple[int, ...],
                proj: int) -> Call:
        t1 = self.conv(x, n1)
        td = self.conv(x, d[0])
        td = self.conv(self.conv(td, d[1], (1, 7), pad=(0, 3)), d[2], (7, 1), pad=(3, 0))
        tq = self.conv(x, q[0])
        for k, c in enumerate(q[1:]):
            tq = self.conv(tq, c, (7, 1) if k % 2 == 0 else (1, 7),
                           pad=(3, 0) if k % 2 == 0 else (0, 3))
        tp = self.conv(self.pool(x, "avg", 1, 1), proj)
        return nn.concatenate([t1, td, tq, tp], axis=1)

    def block_d(self, x: Expr, r3: int, n3: int, r7: int, a7: int, b7: int, c7: int) -> Call:
        t3 = self.conv(self.conv(x, r3), n3, 3, stride=2)
        t7 = self.conv(x, r7)
        t7 = self.conv(self.conv(t7, a7, (1, 7), pad=(0, 3)), b7, (7, 1), pad=(3, 0))
        t7 = self.conv(t7, c7, 3, stride=2)
        return nn.concatenate([t3, t7, self.pool(x, "max", 2, 0)], axis=1)

    def block_e(self, x: Expr, pool: str) -> Call:
        t1 = self.conv(x, 320)
        td = self.conv(x, 384)
        tda = self.conv(td, 384, (1, 3), pad=(0, 1))
        tdb = self.conv(td, 384, (3, 1), pad=(1, 0))
        t3 = self.conv(self.conv(x, 448), 384, 3, pad=1)
        t3a = self.conv(t3, 384, (1, 3), pad=(0, 1))
        t3b = self.conv(t3, 384, (3, 1), pad=(1, 0))
        tp = self.conv(self.pool(x, pool, 1, 1), 192)
        return nn.concatenate([t1, tda, tdb, t3a, t3b, tp], axis=1)


def get_workload(batch_size: int = 1, num_classes: int = 1000, image_shape: Any = (3, 299, 299),
                 dtype: str = "float32", seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of Inception v3 (NCHW; images of at least 75x75)."""
    b = _Builder("NCHW", dtype, seed)
    data, _ = _data(batch_size, image_shape, "NCHW", dtype)
    n = _Net(b)
    x: Expr = n.conv(n.conv(n.conv(data, 32, 3, stride=2), 32, 3), 64, 3, pad=1)
    x = n.pool(x, "max", 2, 0)
    x = n.pool(n.conv(n.conv(x, 80), 192, 3), "max", 2, 0)
    for proj in (32, 64, 64):
        x = n.block_a(x, 64, 64, 96, 96, 48, 64, proj)
    x = n.block_b(x, 384, 64, 96, 96)
    for w in (128, 160, 160, 192):
        x = n.block_c(x, 192, (w, w, 192), (w, w, w, w, 192), 192)
    x = n.block_d(x, 192, 320, 192, 192, 192, 192)
    x = n.block_e(x, "avg")
    x = n.block_e(x, "max")
    out = b.classifier(x, int(x.shape[1]), num_classes)
    return Function((data, *b.params), out), b.values
