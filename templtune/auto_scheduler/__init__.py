"""Template-free auto-scheduler (Ansor-style): the search space comes from the compute
declaration (sketches + random annotation), explored by evolutionary search guided by a cost
model, measured through the same isolated builders/runners as AutoTVM."""

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
)
from .measure_record import (
    RecordReader,
    RecordToFile,
    distill_record_file,
    load_best_record,
    load_records,
    save_records,
)
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
    "PreloadMeasuredStates", "ProgramMeasurer", "RandomModel", "RecordReader", "RecordToFile",
    "SearchTask", "SketchPolicy", "Stage", "State", "TuningOptions", "XGBModel",
    "decode_workload_key", "distill_record_file", "load_best_record", "load_records",
    "make_workload_key", "register_workload", "save_records", "workload_key_to_tensors",
]
