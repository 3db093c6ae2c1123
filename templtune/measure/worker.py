"""Functions that run *inside* measurement worker processes (builders and the runner).

Everything crossing the process boundary is a small frozen dataclass: a request naming a
:class:`~.candidate.Candidate` (how to rebuild the schedule), exported module bytes, numpy arrays
once per argument signature, and a typed reply back. Per-process caches live in the modules
named below; they are filled inside the worker, never inherited.
"""

from __future__ import annotations

# NOTE: the build side, the per-signature runner setup and the per-candidate run live in
# worker_build / worker_setup / worker_run; this module names them all, as the pool's preload
# and the importers of ``templtune.measure.worker`` expect.
from .worker_build import (  # noqa: F401
    _PICKLED,
    BuildReply,
    BuildRequest,
    _detail,
    _target_scope,
    build_candidate,
    export_module,
    load_artifact,
)
from .worker_run import (  # noqa: F401
    _ALLOCATOR_PINNED,
    RunReply,
    RunRequest,
    TimingOptions,
    _pin_scratch_allocator,
    _runtime_name,
    _unwritten,
    compare,
    run_candidate,
)
from .worker_setup import (  # noqa: F401
    _MAX_STATES,
    _RUN,
    LoadRequest,
    RunSetup,
    SetupRequest,
    _random_array,
    _reference_by_build,
    _reference_by_numpy,
    has_run_state,
    load_run_state,
    prepare_run,
)

# NOTE: modules a worker imports while it starts (launched early, alongside the other workers), so
# that the first candidate does not pay for importing the compiler and the runtime.
BUILD_PRELOAD = ("templtune", "templtune.measure.worker", "templtune.build_module",
                 "templtune.lower.lower_api", "templtune.codegen.llvm", "templtune.runtime.module")
RUN_PRELOAD = BUILD_PRELOAD  # the runner builds the naive-schedule reference too
