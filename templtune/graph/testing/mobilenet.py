"""MobileNet v1 (Howard et al. 2017) with folded batch-norm."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Function
from .common import mobilenet


def get_workload(batch_size: int = 1, image_shape: Any = None, layout: str = "NCHW",
                 dtype: str = "float32", num_classes: int = 1000, alpha: float = 1.0,
                 seed: int = 0) -> tuple[Function, dict[str, np.ndarray]]:
    """``image_shape`` is in the layout's order (default 224x224x3); returns
    ``(network, params)`` of MobileNet v1 with width multiplier ``alpha``."""
    if image_shape is None:
        image_shape = (3, 224, 224) if layout == "NCHW" else (224, 224, 3)
    return mobilenet(batch_size, image_shape, layout, dtype, num_classes, alpha, seed)
