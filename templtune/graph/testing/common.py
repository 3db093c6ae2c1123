"""Model zoo builders: ResNet-18/34/50/101/152/200/269 and MobileNet v1 (and the layer
helpers the other zoo networks share).

Weights are random (He initialisation, seeded) and batch-norm is already folded into each
convolution's weights and bias, as an inference compiler does before fusion. The layer shapes
are the published ones; ``get_network`` follows the helper of the network-tuning tutorials.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..ir import Call, Expr, Function, Var
from ..op import GraphError

_RESNET = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)),
           50: ("bottleneck", (3, 4, 6, 3)), 101: ("bottleneck", (3, 4, 23, 3)),
           152: ("bottleneck", (3, 8, 36, 3)), 200: ("bottleneck", (3, 24, 36, 3)),
           269: ("bottleneck", (3, 30, 48, 8))}


class _Builder:
    """Creates parameters (with seeded values) as layers are added."""

    def __init__(self, layout: str, dtype: str, seed: int) -> None:
        self.layout, self.dtype = layout, dtype
        self.rng = np.random.default_rng(seed)
        self.params: list[Var] = []
        self.values: dict[str, np.ndarray] = {}

    def param(self, name: str, shape: tuple[int, ...], fan_in: int) -> Var:
        v = nn.var(name, shape, self.dtype)
        scale = np.sqrt(2.0 / fan_in) if fan_in else 0.05
        self.values[name] = (self.rng.standard_normal(shape) * scale).astype(self.dtype)
        self.params.append(v)
        return v

    def conv(self, x: Expr, name: str, cin: int, cout: int, k: int | tuple[int, int],
             stride: int, pad: Any, depthwise: bool = False, relu: bool = True) -> Call:
        kh, kw = (k, k) if isinstance(k, int) else k
        if depthwise:
            shape = (cin, 1, kh, kw) if self.layout == "NCHW" else (kh, kw, cin, 1)
            fan_in = kh * kw
        else:
            shape = (cout, cin, kh, kw) if self.layout == "NCHW" else (kh, kw, cin, cout)
            fan_in = cin * kh * kw
        w = self.param(f"{name}_weight", shape, fan_in)
        y: Call = nn.conv2d(x, w, strides=stride, padding=pad, groups=cin if depthwise else 1,
                            data_layout=self.layout)
        b = self.param(f"{name}_bias", (cout,), 0)
        y = nn.bias_add(y, b, axis=1 if self.layout == "NCHW" else 3)
        return nn.relu(y) if relu else y

    def classifier(self, x: Expr, channels: int, num_classes: int) -> Call:
        y = nn.batch_flatten(nn.global_avg_pool2d(x, layout=self.layout))
        w = self.param("fc_weight", (num_classes, channels), channels)
        b = self.param("fc_bias", (num_classes,), 0)
        return nn.softmax(nn.bias_add(nn.dense(y, w), b, axis=1), axis=1)


def _data(batch_size: int, image_shape: Any, layout: str, dtype: str) -> tuple[Var, int]:
    """The input variable and its channel count; ``image_shape`` is in the layout's order
    (C, H, W for NCHW; H, W, C for NHWC), as in Relay's model zoo."""
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 3:
        raise GraphError(f"image_shape must have 3 dimensions, got {image_shape!r}")
    if layout not in ("NCHW", "NHWC"):
        raise GraphError(f"unsupported layout {layout!r} (NCHW or NHWC)")
    channels = shape[0] if layout == "NCHW" else shape[2]
    return nn.var("data", (batch_size, *shape), dtype), channels


def _residual_unit(b: _Builder, x: Call, name: str, cin: int, cout: int, stride: int,
                   bottleneck: bool) -> Call:
    if bottleneck:
        mid = cout // 4
        y = b.conv(x, f"{name}_conv1", cin, mid, 1, 1, 0)
        y = b.conv(y, f"{name}_conv2", mid, mid, 3, stride, 1)
        y = b.conv(y, f"{name}_conv3", mid, cout, 1, 1, 0, relu=False)
    else:
        y = b.conv(x, f"{name}_conv1", cin, cout, 3, stride, 1)
        y = b.conv(y, f"{name}_conv2", cout, cout, 3, 1, 1, relu=False)
    short: Expr = x
    if stride != 1 or cin != cout:
        short = b.conv(x, f"{name}_sc", cin, cout, 1, stride, 0, relu=False)
    return nn.relu(nn.add(y, short))


def resnet(num_layers: int = 18, batch_size: int = 1, image_shape: Any = (3, 224, 224),
           layout: str = "NCHW", dtype: str = "float32", num_classes: int = 1000, seed: int = 0
           ) -> tuple[Function, dict[str, np.ndarray]]:
    """ResNet v1 (He et al. 2016) with folded batch-norm: ``(network, params)``."""
    if num_layers not in _RESNET:
        raise GraphError(f"resnet-{num_layers} is not available; choose from {sorted(_RESNET)}")
    kind, units = _RESNET[num_layers]
    bottleneck = kind == "bottleneck"
    b = _Builder(layout, dtype, seed)
    data, channels = _data(batch_size, image_shape, layout, dtype)
    x = b.conv(data, "conv0", channels, 64, 7, 2, 3)
    x = nn.max_pool2d(x, 3, 2, 1, layout=layout)
    cin = 64
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    for stage, (n, cout) in enumerate(zip(units, widths)):
        for u in range(n):
            stride = 2 if (u == 0 and stage > 0) else 1
            x = _residual_unit(b, x, f"stage{stage + 1}_unit{u + 1}", cin, cout, stride,
                               bottleneck)
            cin = cout
    out = b.classifier(x, cin, num_classes)
    return Function((data, *b.params), out), b.values


_MOBILENET = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
              (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def mobilenet(batch_size: int = 1, image_shape: Any = (3, 224, 224), layout: str = "NCHW",
              dtype: str = "float32", num_classes: int = 1000, alpha: float = 1.0, seed: int = 0
              ) -> tuple[Function, dict[str, np.ndarray]]:
    """MobileNet v1 (Howard et al. 2017) with width multiplier ``alpha``: ``(network, params)``."""
    b = _Builder(layout, dtype, seed)
    data, channels = _data(batch_size, image_shape, layout, dtype)
    cin = max(8, int(32 * alpha))
    x = b.conv(data, "conv0", channels, cin, 3, 2, 1)
    for k, (width, stride) in enumerate(_MOBILENET):
        cout = max(8, int(width * alpha))
        x = b.conv(x, f"sep{k}_dw", cin, cin, 3, stride, 1, depthwise=True)
        x = b.conv(x, f"sep{k}_pw", cin, cout, 1, 1, 0)
        cin = cout
    out = b.classifier(x, cin, num_classes)
    return Function((data, *b.params), out), b.values
