"""ResNet-3D for video (NCDHW), the stage layout of Relay's ``resnet_3d`` with folded batch-norm:
a 3x3x3 stem (3x7x7, stride (1, 2, 2), then a 3x3x3 max pool, for frames taller than 32), four
residual stages (basic blocks for 18/34, bottlenecks from 50 on), a global average pool and a
dense classifier."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function
from ..op import GraphError
from .common import _RESNET, _Builder


def _conv(b: _Builder, x: Expr, name: str, cout: int, k: tuple[int, int, int],
          stride: Any = 1, pad: Any = 0, relu: bool = True) -> Call:
    cin = int(x.shape[1])
    w = b.param(f"{name}_weight", (cout, cin, *k), cin * int(np.prod(k)))
    y: Call = nn.bias_add(nn.conv3d(x, w, strides=stride, padding=pad),
                          b.param(f"{name}_bias", (cout,), 0), axis=1)
    return nn.relu(y) if relu else y


def _unit(b: _Builder, x: Expr, name: str, cout: int, stride: int, bottleneck: bool) -> Call:
    if bottleneck:
        y = _conv(b, x, f"{name}_conv1", cout // 4, (1, 1, 1))
        y = _conv(b, y, f"{name}_conv2", cout // 4, (3, 3, 3), stride, 1)
        y = _conv(b, y, f"{name}_conv3", cout, (1, 1, 1), relu=False)
    else:
        y = _conv(b, x, f"{name}_conv1", cout, (3, 3, 3), stride, 1)
        y = _conv(b, y, f"{name}_conv2", cout, (3, 3, 3), 1, 1, relu=False)
    short = x if int(x.shape[1]) == cout and stride == 1 else \
        _conv(b, x, f"{name}_sc", cout, (1, 1, 1), stride, relu=False)
    return nn.relu(nn.add(y, short))


def get_workload(num_layers: int = 18, batch_size: int = 1, image_shape: Any = (3, 16, 112, 112),
                 layout: str = "NCDHW", dtype: str = "float32", num_classes: int = 1000,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of ResNet-3D-``num_layers``; ``image_shape`` is (C, D, H, W)."""
    if layout != "NCDHW":
        raise GraphError(f"resnet3d is built in NCDHW only, not {layout!r}")
    if num_layers not in _RESNET:
        raise GraphError(f"resnet3d num_layers must be one of {sorted(_RESNET)}")
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 4:
        raise GraphError(f"image_shape must be (C, D, H, W), got {image_shape!r}")
    kind, units = _RESNET[num_layers]
    bottleneck = kind == "bottleneck"
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    b = _Builder("NCHW", dtype, seed)
    data = nn.var("data", (batch_size, *shape), dtype)
    if shape[2] <= 32:
        x: Expr = _conv(b, data, "conv0", 64, (3, 3, 3), 1, 1)
    else:
        x = _conv(b, data, "conv0", 64, (3, 7, 7), (1, 2, 2), (1, 3, 3))
        x = nn.max_pool3d(x, pool_size=3, strides=2, padding=1)
    for i, (n, width) in enumerate(zip(units, widths)):
        for j in range(n):
            x = _unit(b, x, f"stage{i + 1}_unit{j + 1}", width, 2 if (j == 0 and i > 0) else 1,
                      bottleneck)
    x = nn.batch_flatten(nn.global_avg_pool3d(x))
    w = b.param("fc_weight", (num_classes, widths[-1]), widths[-1])
    out = nn.softmax(nn.bias_add(nn.dense(x, w), b.param("fc_bias", (num_classes,), 0), axis=1),
                     axis=1)
    return Function((data, *b.params), out), b.values
