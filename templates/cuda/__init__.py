"""CUDA AutoTVM templates, registered on import: the seed tutorial's
``tutorial/conv2d_no_batching`` (also ``conv2d_nchw.cuda``), ``dense.cuda``,
``conv2d_nchw_winograd.cuda`` and any other public module of this folder."""

import sys

from templtune.templates import import_family

import_family(sys.modules[__name__])
