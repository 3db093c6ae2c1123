"""Model zoo for tests, examples and benchmarks, shaped like ``relay.testing``:
``testing.resnet.get_workload(num_layers=18, ...)``, ``testing.mobilenet.get_workload(...)`` and
the tutorials' ``get_network(name, ...)`` helper.

Weights are random (He initialisation, seeded) and batch-norm is already folded into each
convolution's weights and bias, as an inference compiler does before fusion; the layer shapes are
the published ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Function
from ..op import GraphError
from . import mobilenet, resnet

__all__ = ["get_network", "mobilenet", "resnet"]


def get_network(name: str, batch_size: int = 1, layout: str = "NCHW", dtype: str = "float32",
                image_shape: Any = None, seed: int = 0
                ) -> tuple[Function, dict[str, np.ndarray], tuple[int, ...], tuple[int, ...]]:
    """``(network, params, input_shape, output_shape)`` for ``"resnet-N"`` or ``"mobilenet"``;
    ``image_shape`` is in the layout's order (default 224x224 RGB)."""
    if name.startswith("resnet-"):
        try:
            layers = int(name.split("-", 1)[1])
        except ValueError:
            raise GraphError(f"bad network name {name!r}; e.g. resnet-18") from None
        net, params = resnet.get_workload(layers, batch_size, image_shape, layout, dtype,
                                          seed=seed)
    elif name == "mobilenet":
        net, params = mobilenet.get_workload(batch_size, image_shape, layout, dtype, seed=seed)
    else:
        raise GraphError(f"unknown network {name!r}; choose resnet-18/34/50/101 or mobilenet")
    return net, params, net.params[0].shape, net.body.shape
