"""TVM's ``autotvm.tophub`` names over templtune's offline reference logs
(:mod:`templtune.autotvm.task.reference`): nothing is downloaded; the logs are the pre-tuned
files shipped with the templates, plus ``TEMPLTUNE_REFERENCE_LOG_DIR``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from templtune.autotvm.task.reference import reference_log_files
from templtune.autotvm.task.target_compat import as_target

__all__ = ["context", "load_reference_log"]


def context(target: Any, extra_files: Sequence[str] | None = None) -> Any:
    """An ``ApplyHistoryBest`` over the reference logs of ``target`` (one target or a list)
    and ``extra_files``, for ``with autotvm.tophub.context(target):``."""
    from templtune.autotvm.history import ApplyHistoryBest

    targets = target if isinstance(target, (list, tuple)) else [target]
    files = [str(f) for t in targets for f in reference_log_files(t)]
    return ApplyHistoryBest(files + [str(f) for f in extra_files or []])


def load_reference_log(backend: str, model: str, workload_name: str) -> list[tuple[Any, Any]]:
    """The reference records of task ``workload_name`` for ``backend`` and device ``model``.

    As TVM: when no record has that model, the model with the most records is used instead.
    """
    from templtune.autotvm.record import load_from_file

    records = [(inp, res) for f in reference_log_files(as_target(backend))
               for inp, res in load_from_file(f)]
    counts: dict[str, int] = {}
    for inp, _ in records:
        m = as_target(inp.target).model
        counts[m] = counts.get(m, 0) + 1
    if model not in counts and counts:
        model = max(counts.items(), key=lambda kv: kv[1])[0]
    return [(inp, res) for inp, res in records
            if as_target(inp.target).model == model and inp.task.name == workload_name]
