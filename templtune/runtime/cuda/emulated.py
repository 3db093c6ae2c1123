"""A :class:`~templtune.runtime.cuda.backend.CudaBackend` that runs kernels on the CPU
(``TEMPLTUNE_CUDA_BACKEND=emulator``): with the race-checking lockstep emulator
(:mod:`templtune.runtime.cuda.emulate`) by default, or compiled for the host through LLVM
(:mod:`templtune.runtime.cuda.host_emulate`) with ``TEMPLTUNE_CUDA_EMULATOR=llvm``, which is
fast enough for real shapes. Lets the launcher, time evaluator and measurement code run end to
end on machines without a GPU; its timings are host wall-clock and mean nothing about GPU
speed."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from templtune import config
from templtune.codegen.cuda.kernel import specialize
from templtune.runtime.cuda.emulate import run_kernel
from templtune.te.const_eval import eval_const


class EmulatorBackend:
    name = "emulator"

    def __init__(self) -> None:
        self.mem: dict[int, np.ndarray] = {}
        self._next = 1 << 20
        self.mode = config.get("TEMPLTUNE_CUDA_EMULATOR")

    def load(self, module: Any) -> Any:
        if not module.kernels:
            from templtune.runtime.cuda.backend import CudaRuntimeError

            raise CudaRuntimeError(f"module {module.entry_name} carries no kernel IR to emulate "
                                   "(set module.keep_ir = True before pickling it)")
        return {k.name: k for k in module.kernels}

    def function(self, handle: Any, name: str) -> Any:
        kernel = handle[name]
        if self.mode != "llvm":
            return kernel
        from templtune.runtime.cuda.host_emulate import build_host, kernel_to_host

        return (kernel, build_host(kernel_to_host(kernel)))

    def alloc(self, nbytes: int) -> int:
        ptr = self._next
        self._next += max(256, -(-nbytes // 256) * 256)
        self.mem[ptr] = np.zeros(max(1, nbytes), dtype=np.uint8)
        return ptr

    def free(self, ptr: int) -> None:
        self.mem.pop(ptr, None)

    def htod(self, ptr: int, host: np.ndarray) -> None:
        raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        self.mem[ptr][: raw.size] = raw

    def dtoh(self, host: np.ndarray, ptr: int) -> None:
        raw = host.reshape(-1).view(np.uint8)
        raw[:] = self.mem[ptr][: raw.size]

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               ptrs: Sequence[int], shared_bytes: int = 0,
               scalars: Sequence[np.generic] = ()) -> None:
        from templtune import dtype as dt

        kernel, host = fn if isinstance(fn, tuple) else (fn, None)
        env = {v: int(x) for v, x in zip(kernel.scalars, scalars)}
        buffers, shapes = {}, {}
        for b, p in zip(kernel.params, ptrs):
            shapes[b] = shape = [int(eval_const(s, env)) for s in b.shape]
            buffers[b] = self.mem[p].view(dt.to_numpy(b.dtype))[:int(np.prod(shape))]
        if host is None:
            # NOTE: the lockstep emulator runs constant-shaped kernels
            run_kernel(specialize(kernel, env) if env else kernel, buffers)
        else:  # the host module binds the shape variables from the arrays
            host(*[buffers[b].reshape(shapes[b]) for b in kernel.params])

    def synchronize(self) -> None:
        return None

    def timed(self, body: Any) -> float:
        t0 = time.perf_counter()
        body()
        return time.perf_counter() - t0

    def device_attributes(self) -> dict[str, Any]:
        return {"name": "templtune CPU emulator", "arch": "sm_90", "max_threads_per_block": 1024,
                "max_shared_memory_per_block": 49152, "max_registers_per_block": 65536,
                "multiprocessor_count": 1}


def create() -> EmulatorBackend:
    return EmulatorBackend()
