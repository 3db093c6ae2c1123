"""Measurement: builders, runners and the measure batch used by the tuners."""

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

__all__ = [
    "MEASURE_ERROR_COST", "Builder", "BuildResult", "MeasureBatch", "MeasureErrorNo",
    "MeasureInput", "MeasureResult", "Runner", "create_measure_batch", "error_result",
    "measure_option",
]
