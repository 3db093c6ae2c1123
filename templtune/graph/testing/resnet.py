"""ResNet v1 (He et al. 2016) with folded batch-norm."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Function
from .common import resnet


def get_workload(num_layers: int = 18, batch_size: int = 1, image_shape: Any = None,
                 layout: str = "NCHW", dtype: str = "float32", num_classes: int = 1000,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``image_shape`` is in the layout's order (default 224x224x3); returns
    ``(network, params)`` of ResNet-``num_layers`` (18, 34 basic; 50, 101, 152, 200, 269
    bottleneck)."""
    if image_shape is None:
        image_shape = (3, 224, 224) if layout == "NCHW" else (224, 224, 3)
    return resnet(num_layers, batch_size, image_shape, layout, dtype, num_classes, seed)
