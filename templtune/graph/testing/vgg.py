"""VGG 11/13/16/19 (Simonyan and Zisserman 2014), optionally with (folded) batch-norm."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Expr, Function
from ..op import GraphError
from .common import _Builder, _data

_SPEC = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
_FILTERS = (64, 128, 256, 512, 512)


def get_workload(batch_size: int = 1, num_classes: int = 1000, image_shape: Any = (3, 224, 224),
                 dtype: str = "float32", num_layers: int = 11, batch_norm: bool = False,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of VGG-``num_layers`` (NCHW). Batch-norm, when asked for, is folded
    into the convolutions (so the graph is the same; only the weights' statistics differ)."""
    if num_layers not in _SPEC:
        raise GraphError(f"vgg num_layers must be one of {sorted(_SPEC)}, got {num_layers}")
    b = _Builder("NCHW", dtype, seed)
    data, cin = _data(batch_size, image_shape, "NCHW", dtype)
    x: Expr = data
    for stage, (n, width) in enumerate(zip(_SPEC[num_layers], _FILTERS)):
        for j in range(n):
            x = b.conv(x, f"conv{stage + 1}_{j + 1}", cin, width, 3, 1, 1)
            cin = width
        x = nn.max_pool2d(x, pool_size=2, strides=2)
    x = nn.batch_flatten(x)
    features = int(x.shape[1])
    for k, units in enumerate((4096, 4096)):
        w = b.param(f"fc{k + 6}_weight", (units, features), features)
        bias = b.param(f"fc{k + 6}_bias", (units,), 0)
        x = nn.dropout(nn.relu(nn.bias_add(nn.dense(x, w), bias, axis=1)), rate=0.5)
        features = units
    w = b.param("fc8_weight", (num_classes, features), features)
    bias = b.param("fc8_bias", (num_classes,), 0)
    out = nn.softmax(nn.bias_add(nn.dense(x, w), bias, axis=1), axis=1)
    return Function((data, *b.params), out), b.values
