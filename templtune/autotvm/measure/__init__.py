"""Measurement: builders, runners and the measure batch used by the tuners."""

from .fake import FakeBuilder, FakeRunner, ReplayRunner, seeded_cost
from .local_builder import LocalBuilder
from .local_runner import LocalRunner
from .measure import (
    MEASURE_ERROR_COST,
    Builder,
    BuildResult,
    MeasureBatch,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    Runner,
    create_measure_batch,
    error_result,
    measure_option,
)
from .rpc import RPCRunner

__all__ = [
    "MEASURE_ERROR_COST", "Builder", "BuildResult", "FakeBuilder", "FakeRunner", "LocalBuilder",
    "LocalRunner", "MeasureBatch", "MeasureErrorNo", "MeasureInput", "MeasureResult",
    "ReplayRunner", "RPCRunner", "Runner", "create_measure_batch", "error_result", "measure_option",
    "seeded_cost",
]
