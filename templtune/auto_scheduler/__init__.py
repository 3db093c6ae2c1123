"""Template-free auto-scheduler (Ansor-style): the search space comes from the compute
declaration (sketches + random annotation), explored by evolutionary search guided by a cost
model, measured through the same isolated builders/runners as AutoTVM.

Deviations from TVM's auto_scheduler (deliberate, or not done yet):

* ``State`` is immutable: every primitive returns a new state (TVM's Python ``State`` mutates).
  Attached stages keep the extents their own steps give until ``infer_bound_from_state``.
* States are de-duplicated by their encoded step list, not by the printed loop nest.
* Default ``evolutionary_search_population`` is 256 (TVM: 2048): candidates are replayed in
  Python. On CPU, ``max_innermost_split_factor`` defaults to 16 (TVM: 64; register-sized
  innermost tiles, see ``search_policy.CPU_PARAMS``).
* ``XGBModel`` scores Ansor-style per-store features (:mod:`.feature`) with the pack-sum
  objective; see :mod:`.cost_model` for what differs from TVM's feature set.
* ``extract_tasks`` takes a :mod:`templtune.graph` network (Relay is not part of templtune).
* Layout rewrite (llvm, ``layout_rewrite_option=1``) re-lays the ``layout_free_placeholders``
  through a transform stage inside the kernel (INSERT_TRANSFORM_STAGE). Option 2
  (REWRITE_FOR_PRE_TRANSFORMED) builds kernels that read the re-laid constant as an argument
  (``apply_steps_from_state(..., layout_rewrite=2)``; ``relay.build`` uses it and
  pre-transforms the weights once with ``RewrittenLayout.transform``); tasks are still measured
  as option 1, since the runner feeds weights in their original layout
  (:mod:`templtune.auto_scheduler.layout_rewrite`).
* Failed measurements are logged with cost ``1e10`` as in TVM; run timeouts are reported as
  ``RUN_TIMEOUT`` (TVM re-wraps them as ``RUNTIME_DEVICE``).
"""

from .compute_dag import ComputeDAG
from .cost_model import RandomModel, XGBModel
from .dispatcher import ApplyHistoryBest
from .loop_state import Iterator, Stage, State
from .measure import (
    LocalBuilder,
    LocalRPCMeasureContext,
    LocalRunner,
    MeasureInput,
    MeasureResult,
    ProgramMeasurer,
    RPCRunner,
)
from .measure_record import (
    RecordReader,
    RecordToFile,
    distill_record_file,
    load_best_record,
    load_records,
    save_records,
)
from .relay_integration import extract_tasks
from .search_policy import EmptyPolicy, PreloadMeasuredStates, SketchPolicy
from .search_task import HardwareParams, SearchTask, TuningOptions
from .task_scheduler import LogEstimatedLatency, PrintTableInfo, TaskScheduler
from .workload_registry import (
    decode_workload_key,
    make_workload_key,
    register_workload,
    workload_key_to_tensors,
)

__all__ = [
    "ApplyHistoryBest", "ComputeDAG", "EmptyPolicy", "HardwareParams", "Iterator",
    "LocalBuilder", "LocalRPCMeasureContext", "LocalRunner", "LogEstimatedLatency",
    "PrintTableInfo", "TaskScheduler", "MeasureInput", "MeasureResult",
    "PreloadMeasuredStates", "ProgramMeasurer", "RPCRunner", "RandomModel", "RecordReader",
    "RecordToFile",
    "SearchTask", "SketchPolicy", "Stage", "State", "TuningOptions", "XGBModel", "extract_tasks",
    "decode_workload_key", "distill_record_file", "load_best_record", "load_records",
    "make_workload_key", "register_workload", "save_records", "workload_key_to_tensors",
]
