"""numpy reference implementations of the topi operators (test oracles)."""

from __future__ import annotations

from templtune.topi.testing.conv import (
    conv2d_nchw_python,
    conv2d_nhwc_python,
    depthwise_conv2d_python_nchw,
)
from templtune.topi.testing.misc import (
    adaptive_pool2d_python,
    batch_matmul_python,
    dense_python,
    pool2d_python,
    softmax_python,
)
from templtune.topi.testing.sparse import bsr_to_dense, sparse_dense_python

# the Winograd convolution computes a plain convolution
winograd_python = conv2d_nchw_python

__all__ = ["conv2d_nchw_python", "conv2d_nhwc_python", "depthwise_conv2d_python_nchw",
           "dense_python", "pool2d_python", "softmax_python", "winograd_python",
           "adaptive_pool2d_python", "batch_matmul_python", "bsr_to_dense",
           "sparse_dense_python"]
