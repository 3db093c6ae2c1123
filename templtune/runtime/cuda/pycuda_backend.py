"""CUDA backend on pycuda (the ``[cuda]`` extra; it builds only where the CUDA toolkit and
driver are installed)."""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune.runtime.cuda.backend import CudaRuntimeError, CudaUnavailableError


class PyCudaBackend:
    name = "pycuda"

    def __init__(self) -> None:
        try:
            import pycuda.driver as drv
        except ImportError as exc:
            raise CudaUnavailableError("pycuda is not installed") from exc
        self.drv = drv
        try:
            drv.init()
            self.device = drv.Device(0)
            self.ctx = self.device.retain_primary_context()
        except drv.Error as exc:
            raise CudaUnavailableError(f"pycuda cannot open device 0: {exc}") from exc
        self.ctx.push()
        atexit.register(self._close)

    def _close(self) -> None:
        try:
            self.ctx.pop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except self.drv.Error as exc:
            raise CudaRuntimeError(f"{what} failed: {exc}") from exc

    def load(self, module: Any) -> Any:
        if module.binary is None:
            raise CudaRuntimeError(f"module {module.entry_name} was built without nvcc")
        return self._call("module load", self.drv.module_from_buffer, module.binary)

    def function(self, handle: Any, name: str) -> Any:
        return self._call(f"get_function({name})", handle.get_function, name)

    def alloc(self, nbytes: int) -> int:
        mem = self._call("mem_alloc", self.drv.mem_alloc, max(1, nbytes))
        ptr = int(mem)
        self._allocs = getattr(self, "_allocs", {})
        self._allocs[ptr] = mem
        return ptr

    def free(self, ptr: int) -> None:
        mem = getattr(self, "_allocs", {}).pop(ptr, None)
        if mem is not None:
            mem.free()

    def htod(self, ptr: int, host: np.ndarray) -> None:
        self._call("memcpy_htod", self.drv.memcpy_htod, ptr, np.ascontiguousarray(host))

    def dtoh(self, host: np.ndarray, ptr: int) -> None:
        self._call("memcpy_dtoh", self.drv.memcpy_dtoh, host, ptr)

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               ptrs: Sequence[int], shared_bytes: int = 0,
               scalars: Sequence[np.generic] = ()) -> None:
        args = [np.uintp(p) for p in ptrs] + list(scalars)
        self._call("kernel launch", fn, *args, grid=grid, block=block, shared=shared_bytes)

    def synchronize(self) -> None:
        self._call("kernel execution", self.drv.Context.synchronize)

    def timed(self, body: Any) -> float:
        start, end = self.drv.Event(), self.drv.Event()
        start.record()
        body()
        end.record()
        self._call("kernel execution", end.synchronize)
        return float(end.time_since(start)) / 1e3

    def device_attributes(self) -> dict[str, Any]:
        a = self.drv.device_attribute
        d = self.device
        major, minor = d.compute_capability()
        return {
            "name": d.name(), "arch": f"sm_{major}{minor}",
            "max_threads_per_block": d.get_attribute(a.MAX_THREADS_PER_BLOCK),
            "max_shared_memory_per_block": d.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK),
            "max_registers_per_block": d.get_attribute(a.MAX_REGISTERS_PER_BLOCK),
            "multiprocessor_count": d.get_attribute(a.MULTIPROCESSOR_COUNT),
        }


def create() -> PyCudaBackend:
    return PyCudaBackend()
