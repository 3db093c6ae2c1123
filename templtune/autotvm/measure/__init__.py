"""AutoTVM's measurement names (``autotvm.measure.*``), re-exported from :mod:`templtune.measure`."""

import os
from typing import Any

from templtune.autotvm.measure.candidate import MeasureInput, TaskRef, TemplateCandidate, task_ref
from templtune.measure import fake as _fake
from templtune.measure.fake import FakeBuilder, FakeRunner, seeded_cost
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


class ReplayRunner(_fake.ReplayRunner):
    """:class:`templtune.measure.fake.ReplayRunner` that also replays a log file (a path)."""

    def __init__(self, records: Any, missing: MeasureErrorNo = MeasureErrorNo.UNKNOWN_ERROR,
                 ) -> None:
        if isinstance(records, str | os.PathLike):
            from templtune.autotvm.record import load_from_file

            records = list(load_from_file(records))
        super().__init__(records, missing)


__all__ = [
    "MEASURE_ERROR_COST", "Builder", "BuildResult", "FakeBuilder", "FakeRunner", "LocalBuilder",
    "LocalRunner", "MeasureBatch", "MeasureErrorNo", "MeasureInput", "MeasureResult",
    "ReplayRunner", "RPCRunner", "Runner", "create_measure_batch", "error_result", "measure_option",
    "seeded_cost", "TaskRef", "TemplateCandidate", "task_ref",
]
