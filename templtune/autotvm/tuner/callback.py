"""``autotvm.tuner.callback``, where TVM keeps the tuning callbacks; the same objects as
:mod:`templtune.autotvm.callback`."""

from __future__ import annotations

from templtune.autotvm.callback import Monitor, log_to_database, log_to_file, progress_bar

__all__ = ["Monitor", "log_to_database", "log_to_file", "progress_bar"]
