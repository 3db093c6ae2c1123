"""Whole networks: a small Relay-shaped IR, a model zoo, operator fusion, task extraction for
the auto-scheduler, compilation with tuned (or default) schedules, and a graph executor.

Tutorial names work after changing imports
(``from templtune import relay, auto_scheduler, transform, graph_executor``)::

    mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=1)
    tasks, task_weights = auto_scheduler.extract_tasks(mod["main"], params, target)
    ...
    with auto_scheduler.ApplyHistoryBest(log_file):
        with transform.PassContext(opt_level=3, config={"relay.backend.use_auto_scheduler": True}):
            lib = relay.build(mod, target=target, params=params)
    module = graph_executor.GraphModule(lib["default"](dev))

Deviations from Relay: networks are static-shaped dataflow graphs of the operators in
:mod:`templtune.graph.op` (conv2d incl. depthwise, dense, pooling, softmax, bias_add, add, relu,
batch_flatten) and :mod:`templtune.graph.ops` (element-wise math, broadcasting arithmetic,
reshape/transpose/concatenate/slice/pad, resize, reductions, layer norm, batch_matmul) with
batch-norm folded by the model builders; 3x3 convolutions are not rewritten
to Winograd inside networks; groups without a tuned record get a simple default schedule
(parallel and vectorized on a CPU, threads bound on a GPU) instead of TOPI's hand-written ones.
"""

from __future__ import annotations

from . import frontend, nn, ops, testing
from .autotvm_integration import blocked_alternatives
from .build import GraphExecutorFactoryModule, build, default_schedule
from .executor import BenchmarkResult, GraphModule
from .extract import extract_tasks
from .fuse import FusedGroup, partition
from .ir import Call, Function, TensorType, Var
from .nn import add, concatenate, var
from .op import GraphError
from .ops.elemwise import where
from .ops.typed import cast, take
from .reference import evaluate
from .transform import PassContext

__all__ = ["frontend", "ops", "BenchmarkResult", "Call", "Function", "FusedGroup", "GraphError",
           "GraphExecutorFactoryModule", "GraphModule", "PassContext", "TensorType", "Var", "add", "build",
           "default_schedule", "evaluate", "extract_tasks", "nn", "partition", "testing", "var",
           "concatenate", "blocked_alternatives", "cast", "take", "where"]
