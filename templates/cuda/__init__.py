"""CUDA AutoTVM templates (registered on import): the seed tutorial's
``tutorial/conv2d_no_batching`` (also ``conv2d_nchw.cuda``), ``dense.cuda`` and
``conv2d_nchw_winograd.cuda``."""

from . import conv2d_nchw, conv2d_winograd, dense  # noqa: F401
