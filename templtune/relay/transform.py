"""TVM's ``tvm.relay.transform``: the network passes (``ConvertLayout``,
``RemoveUnusedFunctions``), ``Sequential`` and ``PassContext``, so that::

    seq = relay.transform.Sequential([relay.transform.RemoveUnusedFunctions(),
                                      relay.transform.ConvertLayout({"nn.conv2d": ["NHWC", "default"]})])
    with transform.PassContext(opt_level=3):
        mod = seq(mod)

runs as in TVM's tutorials."""

from __future__ import annotations

from templtune.graph.convert_layout import ConvertLayout, RemoveUnusedFunctions
from templtune.graph.transform import Pass, PassContext, PassInfo, Sequential

__all__ = ["ConvertLayout", "Pass", "PassContext", "PassInfo", "RemoveUnusedFunctions",
           "Sequential"]
