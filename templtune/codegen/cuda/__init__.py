"""CUDA backend: loop IR -> CUDA C -> nvcc (:class:`CudaCodegen`, registered as ``cuda``).

Nothing here imports a GPU runtime; compiling needs only ``nvcc``. The module class, the
launcher and the CPU emulators are in :mod:`templtune.runtime.cuda`. Names are imported lazily
to keep ``import templtune`` cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CudaCodegen": "templtune.codegen.cuda.build",
    "CudaArtifact": "templtune.codegen.cuda.build",
    "CudaLimits": "templtune.codegen.cuda.build",
    "limits_from_target": "templtune.codegen.cuda.build",
    "lower_to_kernels": "templtune.codegen.cuda.build",
    "compile_cuda": "templtune.codegen.cuda.compile",
    "find_nvcc": "templtune.codegen.cuda.compile",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'templtune.codegen.cuda' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
