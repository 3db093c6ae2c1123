"""GPU runtime seam for built CUDA modules (imported lazily; nothing here loads a driver at
import time).

:func:`get_backend` picks pycuda when installed, else NVIDIA's ``cuda-python`` bindings; the
``emulator`` backend runs kernels on the CPU through :mod:`templtune.runtime.cuda.emulate`
or :mod:`templtune.runtime.cuda.host_emulate`
(``TEMPLTUNE_CUDA_BACKEND`` selects one by name).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CudaBackend": "templtune.runtime.cuda.backend",
    "CudaRuntimeError": "templtune.runtime.cuda.backend",
    "CudaUnavailableError": "templtune.runtime.cuda.backend",
    "get_backend": "templtune.runtime.cuda.backend",
    "available": "templtune.runtime.cuda.backend",
    "device_exists": "templtune.runtime.cuda.backend",
    "device_attributes": "templtune.runtime.cuda.backend",
    "TimeResult": "templtune.runtime.cuda.timing",
    "measure_loop": "templtune.runtime.cuda.timing",
    "run": "templtune.runtime.cuda.launcher",
    "time_evaluator": "templtune.runtime.cuda.launcher",
    "DeviceArray": "templtune.runtime.cuda.launcher",
    "CudaModule": "templtune.runtime.cuda.module",
    "build_cuda": "templtune.runtime.cuda.module",
    "emulate": "templtune.runtime.cuda.emulate",
    "RaceError": "templtune.runtime.cuda.emulate",
    "EmulationError": "templtune.runtime.cuda.emulate",
    "emulate_llvm": "templtune.runtime.cuda.host_emulate",
    "kernel_to_host": "templtune.runtime.cuda.host_emulate",
    "emulator_selected": "templtune.runtime.cuda.backend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'templtune.runtime.cuda' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
