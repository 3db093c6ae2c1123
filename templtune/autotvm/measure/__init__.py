"""AutoTVM's measurement names (``autotvm.measure.*``), re-exported from :mod:`templtune.measure`."""

from templtune.autotvm.measure.candidate import MeasureInput, TaskRef, TemplateCandidate, task_ref
from templtune.measure.fake import FakeBuilder, FakeRunner, ReplayRunner, seeded_cost
from templtune.measure.local_builder import LocalBuilder
from templtune.measure.local_runner import LocalRunner
from templtune.measure.measure import (
    MEASURE_ERROR_COST,
    Builder,
    BuildResult,
    MeasureBatch,
    MeasureErrorNo,
    MeasureResult,
    Runner,
    create_measure_batch,
    error_result,
    measure_option,
)
from templtune.measure.rpc import RPCRunner

__all__ = [
    "MEASURE_ERROR_COST", "Builder", "BuildResult", "FakeBuilder", "FakeRunner", "LocalBuilder",
    "LocalRunner", "MeasureBatch", "MeasureErrorNo", "MeasureInput", "MeasureResult",
    "ReplayRunner", "RPCRunner", "Runner", "create_measure_batch", "error_result", "measure_option",
    "seeded_cost", "TaskRef", "TemplateCandidate", "task_ref",
]
