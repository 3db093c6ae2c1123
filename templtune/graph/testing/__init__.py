"""Model zoo for tests, examples and benchmarks, shaped like ``relay.testing``:
``testing.resnet.get_workload(num_layers=18, ...)``, ``mobilenet``, ``vgg``, ``squeezenet``,
``inception_v3``, ``densenet`` and the tutorials' ``get_network(name, ...)`` helper.

Weights are random (He initialisation, seeded) and batch-norm is already folded into each
convolution's weights and bias (DenseNet's pre-activation batch-norms stay ``nn.batch_norm``), as an inference compiler does before fusion; the layer shapes are
the published ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Function
from ..op import GraphError
from . import densenet, inception_v3, mobilenet, resnet, resnet3d, squeezenet, vgg

__all__ = ["densenet", "get_network", "inception_v3", "mobilenet", "resnet", "resnet3d",
           "squeezenet", "vgg"]


def get_network(name: str, batch_size: int = 1, layout: str = "NCHW", dtype: str = "float32",
                image_shape: Any = None, seed: int = 0
                ) -> tuple[Function, dict[str, np.ndarray], tuple[int, ...], tuple[int, ...]]:
    """``(network, params, input_shape, output_shape)`` for ``"resnet-N"``, ``"mobilenet"``,
    ``"vgg-N"``, ``"densenet-N"``, ``"squeezenet_v1.0"`` / ``"squeezenet_v1.1"`` or
    ``"inception_v3"`` (the last four NCHW only) or ``"resnet3d-N"`` (NCDHW, image_shape
    (C, D, H, W), default 3x16x112x112); ``image_shape`` is in the layout's order (default
    224x224 RGB, 299x299 for Inception)."""
    others = name.startswith(("vgg-", "densenet-", "squeezenet_v")) or name == "inception_v3"
    if others and layout != "NCHW":
        raise GraphError(f"{name} is built in NCHW only, not {layout}")
    if name.startswith(("vgg-", "densenet-")):
        try:
            size = int(name.split("-", 1)[1])
        except ValueError:
            raise GraphError(f"bad network name {name!r}; e.g. vgg-16, densenet-121") from None
        shape = image_shape or (3, 224, 224)
        if name.startswith("vgg-"):
            net, params = vgg.get_workload(batch_size, image_shape=shape, dtype=dtype,
                                           num_layers=size, seed=seed)
        else:
            net, params = densenet.get_workload(size, batch_size=batch_size, image_shape=shape,
                                                dtype=dtype, seed=seed)
    elif name.startswith("squeezenet_v"):
        net, params = squeezenet.get_workload(batch_size, version=name[len("squeezenet_v"):],
                                              image_shape=image_shape or (3, 224, 224),
                                              dtype=dtype, seed=seed)
    elif name == "inception_v3":
        net, params = inception_v3.get_workload(batch_size, image_shape=image_shape
                                                or (3, 299, 299), dtype=dtype, seed=seed)
    elif name.startswith("resnet3d-"):
        try:
            layers = int(name.split("-", 1)[1])
        except ValueError:
            raise GraphError(f"bad network name {name!r}; e.g. resnet3d-18") from None
        net, params = resnet3d.get_workload(layers, batch_size, image_shape or (3, 16, 112, 112),
                                            dtype=dtype, seed=seed)
    elif name.startswith("resnet-"):
        try:
            layers = int(name.split("-", 1)[1])
        except ValueError:
            raise GraphError(f"bad network name {name!r}; e.g. resnet-18") from None
        net, params = resnet.get_workload(layers, batch_size, image_shape, layout, dtype,
                                          seed=seed)
    elif name == "mobilenet":
        net, params = mobilenet.get_workload(batch_size, image_shape, layout, dtype, seed=seed)
    else:
        raise GraphError(f"unknown network {name!r}; choose resnet-18/34/50/101/152/200/269, "
                         "mobilenet, vgg-11/13/16/19, densenet-121/161/169/201, "
                         "squeezenet_v1.0/v1.1, inception_v3 or resnet3d-N")
    return net, params, net.params[0].shape, net.body.shape
