"""ResNet v1 (He et al. 2016) with folded batch-norm."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Function
from .common import resnet


def get_workload(num_layers: int = 18, batch_size: int = 1, image_shape: Any = (3, 224, 224),
                 layout: str = "NCHW", dtype: str = "float32", num_classes: int = 1000,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of ResNet-``num_layers`` (18, 34, 50 or 101)."""
    return resnet(num_layers, batch_size, image_shape, layout, dtype, num_classes, seed)
