"""DenseNet 121/161/169/201 (Huang et al. 2017): pre-activation (batch-norm, ReLU,
convolution) layers whose outputs are concatenated onto their block's input, with transition
layers (1x1 convolution, 2x2 average pool) between blocks.

Relay's model zoo concatenates only the layers' outputs (each layer reading the previous one);
this is the published architecture. The final pool is a global average.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function
from ..op import GraphError
from .common import _Builder, _data

_SPEC = {121: (64, 32, (6, 12, 24, 16)), 161: (96, 48, (6, 12, 36, 24)),
         169: (64, 32, (6, 12, 32, 32)), 201: (64, 32, (6, 12, 48, 32))}


def _bn_relu(b: _Builder, x: Expr, name: str) -> Call:
    c = int(x.shape[1])
    gamma = b.param(f"{name}_gamma", (c,), 0)
    b.values[gamma.name] = (1.0 + 0.1 * b.rng.standard_normal(c)).astype(b.dtype)
    beta = b.param(f"{name}_beta", (c,), 0)
    mean = b.param(f"{name}_moving_mean", (c,), 0)
    var = b.param(f"{name}_moving_var", (c,), 0)
    b.values[var.name] = (1.0 + 0.5 * b.rng.random(c)).astype(b.dtype)
    return nn.relu(nn.batch_norm(x, gamma, beta, mean, var, axis=1))


def _conv(b: _Builder, x: Expr, name: str, cout: int, k: int, stride: int = 1, pad: int = 0
          ) -> Call:
    cin = int(x.shape[1])
    w = b.param(f"{name}_weight", (cout, cin, k, k), cin * k * k)
    return nn.conv2d(x, w, strides=stride, padding=pad)


def get_workload(densenet_size: int = 121, classes: int = 1000, batch_size: int = 1,
                 image_shape: Any = (3, 224, 224), dtype: str = "float32", bn_size: int = 4,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of DenseNet-``densenet_size`` (NCHW)."""
    if densenet_size not in _SPEC:
        raise GraphError(f"densenet_size must be one of {sorted(_SPEC)}, got {densenet_size}")
    init, growth, blocks = _SPEC[densenet_size]
    b = _Builder("NCHW", dtype, seed)
    data, _ = _data(batch_size, image_shape, "NCHW", dtype)
    x: Expr = _bn_relu(b, _conv(b, data, "conv0", init, 7, 2, 3), "bn0")
    x = nn.max_pool2d(x, pool_size=3, strides=2, padding=1)
    for i, n_layers in enumerate(blocks):
        for j in range(n_layers):
            y = _conv(b, _bn_relu(b, x, f"b{i}_{j}_bn1"), f"b{i}_{j}_conv1", bn_size * growth, 1)
            y = _conv(b, _bn_relu(b, y, f"b{i}_{j}_bn2"), f"b{i}_{j}_conv2", growth, 3, pad=1)
            x = nn.concatenate([x, y], axis=1)
        if i != len(blocks) - 1:
            x = _conv(b, _bn_relu(b, x, f"t{i}_bn"), f"t{i}_conv", int(x.shape[1]) // 2, 1)
            x = nn.avg_pool2d(x, pool_size=2, strides=2)
    x = _bn_relu(b, x, "bn_final")
    out = b.classifier(x, int(x.shape[1]), classes)
    return Function((data, *b.params), out), b.values
