"""``autotvm.graph_tuner``: choose each convolution's NCHW[x]c blocking for the whole network,
counting the cost of the layout transforms between layers (TVM's graph tuner)::

    tuner = DPTuner(mod["main"], {"data": (1, 3, 224, 224)}, "conv2d.log",
                    [relay.op.get("nn.conv2d")], "llvm")
    tuner.benchmark_layout_transform(min_exec_num=100)
    tuner.run()
    tuner.write_opt_sch2record_file("graph_opt.log")
    with autotvm.apply_graph_best("graph_opt.log"), PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
"""

from .base import BaseGraphTuner, Candidate, GraphTunerError
from .dp import DPTuner
from .pbqp import PBQPTuner

__all__ = ["BaseGraphTuner", "Candidate", "DPTuner", "GraphTunerError", "PBQPTuner"]
