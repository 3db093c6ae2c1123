"""CUDA backend: loop IR -> CUDA C -> nvcc, plus a CPU emulator for semantic checks.

Nothing here imports a GPU runtime; :func:`build_cuda` needs only ``nvcc`` to compile (and not
even that with ``compile=False``). Names are imported lazily to keep ``import templtune`` cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_cuda": "templtune.runtime.cuda.module",
    "CudaModule": "templtune.runtime.cuda.module",
    "CudaLimits": "templtune.runtime.cuda.module",
    "lower_to_kernels": "templtune.runtime.cuda.module",
    "compile_cuda": "templtune.codegen.cuda.compile",
    "find_nvcc": "templtune.codegen.cuda.compile",
    "emulate": "templtune.runtime.cuda.emulate",
    "RaceError": "templtune.runtime.cuda.emulate",
    "EmulationError": "templtune.runtime.cuda.emulate",
    "emulate_llvm": "templtune.runtime.cuda.host_emulate",
    "kernel_to_host": "templtune.runtime.cuda.host_emulate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'templtune.codegen.cuda' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
