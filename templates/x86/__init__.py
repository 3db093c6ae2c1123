"""x86 AutoTVM templates (registered on import): ``conv2d_nchw``, ``conv2d_nhwc``,
``conv2d_nchw_wvec``, ``depthwise_conv2d_nchw``, ``dense`` and ``conv2d_winograd`` (each also as ``<name>.x86``)."""

from . import (  # noqa: F401
    conv2d_nchw,
    conv2d_nchw_wvec,
    conv2d_nhwc,
    conv2d_winograd,
    dense,
    depthwise_conv2d_nchw,
)
