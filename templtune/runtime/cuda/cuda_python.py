"""CUDA backend on NVIDIA's ``cuda-python`` driver bindings (``cuda.bindings.driver``, or the
older ``cuda.cuda``), used when pycuda is absent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune.runtime.cuda.backend import CudaRuntimeError, CudaUnavailableError


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError as exc:
            raise CudaUnavailableError("cuda-python is not installed") from exc
    return driver


class CudaPythonBackend:
    """Driver-API backend: one primary context on device 0."""

    name = "cuda-python"

    def __init__(self) -> None:
        cu = self.cu = _driver()
        try:
            self._check(cu.cuInit(0), "cuInit")
        except CudaRuntimeError as exc:
            raise CudaUnavailableError(str(exc)) from exc
        self.device = self._check(cu.cuDeviceGet(0), "cuDeviceGet")
        self.ctx = self._check(cu.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self._check(cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def _check(self, res: Any, what: str) -> Any:
        if not isinstance(res, tuple):
            res = (res,)
        err = res[0]
        if int(getattr(err, "value", err)) != 0:
            name = self.cu.cuGetErrorName(err)
            text = name[1].decode() if isinstance(name, tuple) and name[1] else str(err)
            raise CudaRuntimeError(f"{what} failed: {text}")
        if len(res) == 1:
            return None
        return res[1] if len(res) == 2 else res[1:]

    def load(self, module: Any) -> Any:
        if module.binary is None:
            raise CudaRuntimeError(f"module {module.entry_name} was built without nvcc")
        data = module.binary
        if not data.startswith(b"\x7fELF") and not data.endswith(b"\0"):
            data = data + b"\0"  # PTX text must be NUL-terminated
        return self._check(self.cu.cuModuleLoadData(data), "cuModuleLoadData")

    def function(self, handle: Any, name: str) -> Any:
        return self._check(self.cu.cuModuleGetFunction(handle, name.encode()),
                           f"cuModuleGetFunction({name})")

    def alloc(self, nbytes: int) -> int:
        return int(self._check(self.cu.cuMemAlloc(max(1, nbytes)), "cuMemAlloc"))

    def _dptr(self, ptr: int) -> Any:
        return self.cu.CUdeviceptr(ptr)

    def free(self, ptr: int) -> None:
        self._check(self.cu.cuMemFree(self._dptr(ptr)), "cuMemFree")

    def htod(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        self._check(self.cu.cuMemcpyHtoD(self._dptr(ptr), host.ctypes.data, host.nbytes),
                    "cuMemcpyHtoD")

    def dtoh(self, host: np.ndarray, ptr: int) -> None:
        assert host.flags.c_contiguous
        self._check(self.cu.cuMemcpyDtoH(host.ctypes.data, self._dptr(ptr), host.nbytes),
                    "cuMemcpyDtoH")

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               ptrs: Sequence[int], shared_bytes: int = 0,
               scalars: Sequence[np.generic] = ()) -> None:
        # NOTE: kernelParams is an array of addresses, each pointing at one argument value.
        vals = [np.array([p], dtype=np.uint64) for p in ptrs]
        vals += [np.array([v]) for v in scalars]  # keeps each scalar's own dtype
        addrs = np.array([v.ctypes.data for v in vals], dtype=np.uint64)
        self._check(self.cu.cuLaunchKernel(fn, *grid, *block, shared_bytes, 0,
                                           addrs.ctypes.data, 0), "cuLaunchKernel")

    def synchronize(self) -> None:
        self._check(self.cu.cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)")

    def timed(self, body: Any) -> float:
        cu = self.cu
        start = self._check(cu.cuEventCreate(0), "cuEventCreate")
        end = self._check(cu.cuEventCreate(0), "cuEventCreate")
        try:
            self._check(cu.cuEventRecord(start, 0), "cuEventRecord")
            body()
            self._check(cu.cuEventRecord(end, 0), "cuEventRecord")
            self._check(cu.cuEventSynchronize(end), "kernel execution (cuEventSynchronize)")
            ms = self._check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        finally:
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(end)
        return float(ms) / 1e3

    def device_attributes(self) -> dict[str, Any]:
        cu, a = self.cu, self.cu.CUdevice_attribute

        def get(attr: str) -> int:
            return int(self._check(cu.cuDeviceGetAttribute(getattr(a, attr), self.device),
                                   attr))

        major = get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        name = self._check(cu.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        return {
            "name": name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name),
            "arch": f"sm_{major}{minor}",
            "max_threads_per_block": get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "max_shared_memory_per_block": get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            "max_registers_per_block": get("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
            "multiprocessor_count": get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        }


def create() -> CudaPythonBackend:
    return CudaPythonBackend()
