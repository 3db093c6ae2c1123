"""SqueezeNet 1.0 / 1.1 (Iandola et al. 2016), the layer shapes of Relay's model zoo."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function
from ..op import GraphError
from .common import _Builder, _data


def _fire(b: _Builder, x: Expr, name: str, cin: int, squeeze: int, e1: int, e3: int) -> Call:
    s = b.conv(x, f"{name}_squeeze", cin, squeeze, 1, 1, 0)
    left = b.conv(s, f"{name}_expand1x1", squeeze, e1, 1, 1, 0)
    right = b.conv(s, f"{name}_expand3x3", squeeze, e3, 3, 1, 1)
    return nn.concatenate([left, right], axis=1)


_FIRES: dict[str, tuple[tuple[int, int, int] | str, ...]] = {"1.0": ((16, 64, 64), (16, 64, 64), (32, 128, 128), "pool", (32, 128, 128),
                  (48, 192, 192), (48, 192, 192), (64, 256, 256), "pool", (64, 256, 256)),
          "1.1": ((16, 64, 64), (16, 64, 64), "pool", (32, 128, 128), (32, 128, 128), "pool",
                  (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256))}


def get_workload(batch_size: int = 1, num_classes: int = 1000, version: str = "1.0",
                 image_shape: Any = (3, 224, 224), dtype: str = "float32", seed: int = 0
                 ) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of SqueezeNet ``version`` ("1.0" or "1.1"), NCHW only."""
    if version not in _FIRES:
        raise GraphError(f"squeezenet version must be '1.0' or '1.1', got {version!r}")
    b = _Builder("NCHW", dtype, seed)
    data, cin = _data(batch_size, image_shape, "NCHW", dtype)
    if version == "1.0":
        x: Expr = b.conv(data, "conv1", cin, 96, 7, 2, 3)
        cin = 96
    else:
        x = b.conv(data, "conv1", cin, 64, 3, 2, 1)
        cin = 64
    x = nn.max_pool2d(x, pool_size=3, strides=2)
    for k, spec in enumerate(_FIRES[version]):
        if isinstance(spec, str):  # "pool"
            x = nn.max_pool2d(x, pool_size=3, strides=2)
            continue
        squeeze, e1, e3 = spec
        x = _fire(b, x, f"fire{k}", cin, squeeze, e1, e3)
        cin = e1 + e3
    x = nn.dropout(x, rate=0.5)
    x = b.conv(x, "conv_final", cin, num_classes, 1, 1, 0)
    out = nn.softmax(nn.batch_flatten(nn.global_avg_pool2d(x)), axis=1)
    return Function((data, *b.params), out), b.values
