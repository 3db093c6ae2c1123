"""MobileNet v1 (Howard et al. 2017) with folded batch-norm."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Function
from .common import mobilenet


def get_workload(batch_size: int = 1, image_shape: Any = (3, 224, 224), layout: str = "NCHW",
                 dtype: str = "float32", num_classes: int = 1000, alpha: float = 1.0,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``(network, params)`` of MobileNet v1 with width multiplier ``alpha``."""
    return mobilenet(batch_size, image_shape, layout, dtype, num_classes, alpha, seed)
