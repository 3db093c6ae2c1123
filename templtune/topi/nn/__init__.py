"""Neural-network operator declarations (``topi.nn``)."""

from __future__ import annotations

from templtune.topi.nn.conv2d import (
    conv2d_nchw,
    conv2d_nhwc,
    depthwise_conv2d_nchw,
    group_conv2d_nchw,
)
from templtune.topi.nn.dense import batch_flatten, batch_matmul, dense
from templtune.topi.nn.elemwise import bias_add, leaky_relu, relu
from templtune.topi.nn.pad import pad
from templtune.topi.nn.pooling import adaptive_pool2d, global_pool2d, pool2d
from templtune.topi.nn.softmax import softmax
from templtune.topi.nn.sparse import sparse_dense
from templtune.topi.nn.winograd import (
    conv2d_winograd_nchw,
    conv2d_winograd_nhwc,
    conv2d_winograd_weight_transform,
    winograd_transform_matrices,
)

__all__ = ["conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "dense", "relu",
           "leaky_relu", "bias_add", "pad", "pool2d", "softmax", "conv2d_winograd_nchw",
           "conv2d_winograd_weight_transform", "winograd_transform_matrices", "batch_matmul",
           "batch_flatten", "adaptive_pool2d", "global_pool2d", "group_conv2d_nchw",
           "conv2d_winograd_nhwc", "sparse_dense"]
