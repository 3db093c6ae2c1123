"""TVM-compatible import path ``autotvm.task.dispatcher``: re-exports
:mod:`templtune.autotvm.dispatcher`."""

from templtune.autotvm.dispatcher import (  # noqa: F401
    ApplyConfig,
    ApplyFixedConfig,
    ApplyGraphBest,
    ApplyHistoryBest,
    ConfigNotFoundError,
    DispatchContext,
    FallbackContext,
    apply_history_best,
    clear_fallback_cache,
)
