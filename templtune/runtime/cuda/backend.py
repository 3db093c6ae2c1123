"""The :class:`CudaBackend` protocol, its errors, and backend selection."""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from templtune import config
from templtune.errors import TempltuneError

log = logging.getLogger("templtune.runtime.cuda")

_BACKENDS = {
    "pycuda": "templtune.runtime.cuda.pycuda_backend",
    "cuda-python": "templtune.runtime.cuda.cuda_python",
    "emulator": "templtune.runtime.cuda.emulated",
}
_DEFAULT_ORDER = ("pycuda", "cuda-python")


class CudaRuntimeError(TempltuneError, RuntimeError):
    """A CUDA driver call failed: module load, launch, an illegal address in a kernel, ...
    Measurement maps it to ``RUNTIME_DEVICE``. After a kernel fault the CUDA context is
    unusable: the process that ran it must be restarted."""


class CudaUnavailableError(CudaRuntimeError):
    """No usable GPU runtime: neither pycuda nor cuda-python, or no driver / device."""


class CudaBackend(Protocol):
    """What the launcher needs from a CUDA runtime. Device pointers are plain ints."""

    name: str

    def load(self, module: Any) -> Any:
        """Load a built :class:`~templtune.runtime.cuda.module.CudaModule`; return a handle."""

    def function(self, handle: Any, name: str) -> Any:
        """The kernel ``name`` of a loaded module."""

    def alloc(self, nbytes: int) -> int: ...

    def free(self, ptr: int) -> None: ...

    def htod(self, ptr: int, host: np.ndarray) -> None: ...

    def dtoh(self, host: np.ndarray, ptr: int) -> None: ...

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               ptrs: Sequence[int], shared_bytes: int = 0) -> None: ...

    def synchronize(self) -> None: ...

    def timed(self, body: Any) -> float:
        """Run ``body()`` between two CUDA events; return the elapsed seconds."""

    def device_attributes(self) -> dict[str, Any]:
        """``arch``, ``max_threads_per_block``, ``max_shared_memory_per_block``,
        ``max_registers_per_block``, ``name`` of device 0."""


def selected_name() -> str | None:
    """The backend named by ``$TEMPLTUNE_CUDA_BACKEND`` (None: pick the first that works).

    NOTE: the one place that reads the choice, so the emulator is selected the same way for
    loading, launching and for keeping kernel IR in pickled modules.
    """
    return config.get("TEMPLTUNE_CUDA_BACKEND") or None


def emulator_selected() -> bool:
    """True when kernels run on the CPU emulator: built modules must then keep their IR."""
    return config.cuda_emulated()


@functools.cache
def _load_backend(name: str) -> CudaBackend:
    mod = importlib.import_module(_BACKENDS[name])
    return mod.create()  # type: ignore[no-any-return]


def get_backend(name: str | None = None) -> CudaBackend:
    """The backend ``name`` (``pycuda``, ``cuda-python``, ``emulator``), else
    ``$TEMPLTUNE_CUDA_BACKEND``, else the first of pycuda / cuda-python that works.

    Raises
    ------
    CudaUnavailableError
        None can be loaded; the message lists why each failed.
    """
    name = name or selected_name()
    if name is not None and name not in _BACKENDS:
        raise CudaUnavailableError(f"unknown CUDA backend {name!r}; expected one of "
                                   f"{', '.join(_BACKENDS)}")
    reasons = []
    for cand in ((name,) if name else _DEFAULT_ORDER):
        try:
            return _load_backend(cand)
        except Exception as exc:  # noqa: BLE001 - any import/driver failure means "unavailable"
            reasons.append(f"{cand}: {type(exc).__name__}: {exc}")
            log.debug("CUDA backend %s unavailable: %s", cand, exc)
    raise CudaUnavailableError("no CUDA runtime available (" + "; ".join(reasons) + ")")


def available(name: str | None = None) -> bool:
    """True when :func:`get_backend` would succeed."""
    try:
        get_backend(name)
    except CudaUnavailableError:
        return False
    return True


def device_exists() -> bool:
    """True when a real GPU runtime (pycuda or cuda-python with a device) is usable."""
    return any(available(n) for n in _DEFAULT_ORDER)


def device_attributes(name: str | None = None) -> dict[str, Any]:
    """Limits of device 0 (``arch``, ``max_threads_per_block``, ``max_shared_memory_per_block``,
    ``max_registers_per_block``, ...) for filling a ``Target("cuda")`` from the real GPU.

    Raises
    ------
    CudaUnavailableError
        No GPU runtime.
    """
    return get_backend(name).device_attributes()
