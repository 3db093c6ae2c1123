"""x86 AutoTVM templates (registered on import): ``conv2d_nchw``, ``conv2d_nhwc``,
``depthwise_conv2d_nchw``, ``dense`` and ``conv2d_winograd`` (each also as ``<name>.x86``)."""

from . import conv2d_nchw, conv2d_nhwc, conv2d_winograd, dense, depthwise_conv2d_nchw  # noqa: F401
