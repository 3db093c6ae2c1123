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


#: the backend name records carry when their timings come from the CPU emulator
EMULATOR = "emulator"
_EMULATOR_HINT = ("unset TEMPLTUNE_CUDA_BACKEND (or set it to `emulator`) to run CUDA modules on "
                  "the CPU emulator, whose timings are CPU timings")
_warned_fallback = False


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
               ptrs: Sequence[int], shared_bytes: int = 0,
               scalars: Sequence[np.generic] = ()) -> None:
        """Launch ``fn`` with the buffer pointers ``ptrs`` then the by-value ``scalars`` (shape
        variables, numpy scalars of the kernel's parameter types)."""

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
    """True when kernels run on the CPU emulator (``TEMPLTUNE_CUDA_BACKEND=emulator``, or the
    setting unset and no GPU runtime / device here): built modules must then keep their IR."""
    if config.cuda_emulated():
        return True
    return selected_name() is None and _real_backend() is None


def is_emulated_record(res: Any) -> bool:
    """Whether a measure result's timings come from the CPU emulator (its ``device`` field)."""
    return getattr(res, "device", "") == EMULATOR


def use_emulated_records(include_emulated: bool | None) -> bool:
    """Whether ``apply_history_best`` may use records timed on the emulator: as asked, else
    (None) exactly when CUDA modules run on the emulator here (a real GPU ignores them)."""
    return emulator_selected() if include_emulated is None else bool(include_emulated)


@functools.cache
def _real_backend() -> tuple[str, CudaBackend] | None:
    # NOTE: probed once per process: a driver or device does not appear while it runs, and the
    # probe (imports, context creation) is too slow to repeat on every launch.
    for cand in _DEFAULT_ORDER:
        try:
            return cand, _load_backend(cand)
        except Exception as exc:  # noqa: BLE001 - any import/driver failure means "unavailable"
            _REAL_REASONS.append(f"{cand}: {type(exc).__name__}: {exc}")
            log.debug("CUDA backend %s unavailable: %s", cand, exc)
    return None


_REAL_REASONS: list[str] = []


def _fallback_to_emulator() -> CudaBackend:
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        log.warning("no CUDA GPU runtime or device (%s): CUDA modules run on the CPU emulator; "
                    "its timings are CPU timings, not GPU timings (set TEMPLTUNE_CUDA_BACKEND="
                    "pycuda or cuda-python to require a GPU)", "; ".join(_REAL_REASONS))
    return _load_backend(EMULATOR)


@functools.cache
def _load_backend(name: str) -> CudaBackend:
    mod = importlib.import_module(_BACKENDS[name])
    return mod.create()  # type: ignore[no-any-return]


def get_backend(name: str | None = None) -> CudaBackend:
    """The backend ``name`` (``pycuda``, ``cuda-python``, ``emulator``), else
    ``$TEMPLTUNE_CUDA_BACKEND``, else the first of pycuda / cuda-python that works, else the
    CPU emulator (with one warning per process that its timings are CPU timings).

    Raises
    ------
    CudaUnavailableError
        A real runtime was asked for (by ``name`` or the setting) and cannot be loaded; the
        message says why and names the emulator setting.
    """
    name = name or selected_name()
    if name is not None and name not in _BACKENDS:
        raise CudaUnavailableError(f"unknown CUDA backend {name!r}; expected one of "
                                   f"{', '.join(_BACKENDS)}")
    if name is None:
        real = _real_backend()
        return real[1] if real is not None else _fallback_to_emulator()
    try:
        return _load_backend(name)
    except Exception as exc:  # noqa: BLE001 - any import/driver failure means "unavailable"
        log.debug("CUDA backend %s unavailable: %s", name, exc)
        if name == EMULATOR:
            raise
        raise CudaUnavailableError(
            f"CUDA backend {name!r} was asked for (TEMPLTUNE_CUDA_BACKEND) but no GPU runtime is "
            f"usable ({type(exc).__name__}: {exc}); {_EMULATOR_HINT}") from exc


def available(name: str | None = None) -> bool:
    """True when :func:`get_backend` would succeed."""
    try:
        get_backend(name)
    except CudaUnavailableError:
        return False
    return True


def device_exists() -> bool:
    """True when a real GPU runtime (pycuda or cuda-python with a device) is usable."""
    return _real_backend() is not None


def device_attributes(name: str | None = None) -> dict[str, Any]:
    """Limits of device 0 (``arch``, ``max_threads_per_block``, ``max_shared_memory_per_block``,
    ``max_registers_per_block``, ...) for filling a ``Target("cuda")`` from the real GPU.

    Raises
    ------
    CudaUnavailableError
        No GPU runtime.
    """
    return get_backend(name).device_attributes()
