"""Callable modules: native object code loaded into an MCJIT engine, called on numpy arrays.

A :class:`Module` is created from object code (never from IR), both after a build and after
:func:`load_module` in another process, so the two paths are the same code.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from templtune.codegen.llvm import compile as cc
from templtune.codegen.llvm import pool
from templtune.codegen.llvm.build import LLVMArtifact
from templtune.codegen.llvm.render import KernelStatus, ParallelRuntime, ParamInfo
from templtune.errors import CodegenError, RuntimeCallError
from templtune.runtime.allocator import retain_scratch_memory
from templtune.runtime.arguments import _unwrap, check_arguments  # noqa: F401
from templtune.runtime.fork_guard import _ForkGuard, fork_check  # noqa: F401
from templtune.runtime.registry import register_loader

log = logging.getLogger("templtune.runtime")

# NOTE: version 2: kernels return an i32 status (version 1 returned void)
_MAGIC = b"TTMOD\x02"
_CTYPES_INT = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
               "uint64": ctypes.c_uint64, "int16": ctypes.c_int16, "int8": ctypes.c_int8}


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """What a time evaluator returns: seconds per call for each repeat (TVM's ProfileResult)."""

    mean: float
    results: tuple[float, ...]
    numbers: tuple[int, ...] = ()  # the calls per repeat actually timed (after min_repeat_ms growth)

    @property
    def median(self) -> float:
        return float(np.median(self.results)) if self.results else 0.0

    @property
    def std(self) -> float:
        return float(np.std(self.results)) if self.results else 0.0

    @property
    def min(self) -> float:
        return min(self.results) if self.results else 0.0

    @property
    def max(self) -> float:
        return max(self.results) if self.results else 0.0


class Module:
    """A compiled function, callable on numpy arrays or ``templtune.nd`` arrays.

    Use :func:`templtune.build` to make one and :func:`load_module` to re-create one from
    :meth:`export` bytes.
    """

    def __init__(self, obj: bytes, header: dict[str, Any]) -> None:
        retain_scratch_memory()
        self._obj = obj
        self._header = header
        self.entry_name: str = header["entry"]
        self._params = tuple(ParamInfo(p["name"], p["dtype"], tuple(p["shape"]))
                             for p in header["params"])
        self._shape_vars = tuple((n, d) for n, d in header["shape_vars"])
        self._ir: str = header.get("ir", "")
        s = header["spec"]
        self._spec = cc.MachineSpec(s["triple"], s["cpu"], s["features"], s["opt_level"])
        # modules exported before templtune had its own pool ran on libgomp
        self._runtime = (ParallelRuntime(header.get("pool", ParallelRuntime.GOMP.value))
                         if header.get("parallel") else ParallelRuntime.SERIAL)
        if self._runtime is ParallelRuntime.GOMP:
            cc.load_libgomp()
        elif self._runtime is ParallelRuntime.POOL:
            if not pool.available():
                raise CodegenError(f"{self.entry_name} runs its parallel loops on templtune's "
                                   "thread pool, which needs x86-64 Linux")
            pool.ensure_pool()
        tm = cc.new_target_machine(self._spec)
        host = llvm.parse_assembly("", context=llvm.create_context())
        host.triple = self._spec.triple
        try:
            self._engine = llvm.create_mcjit_compiler(host, tm)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self._engine.finalize_object()
        except RuntimeError as e:
            raise CodegenError(f"cannot load the object code of {self.entry_name!r}: {e}") from None
        addr = self._engine.get_function_address(self.entry_name)
        taddr = self._engine.get_function_address(self.entry_name + ".__timer")
        if not addr or not taddr:
            raise CodegenError(f"symbol {self.entry_name!r} not found in the loaded object code")
        argtypes: list[Any] = [ctypes.c_void_p] * len(self._params)
        argtypes += [_CTYPES_INT[d] for _, d in self._shape_vars]
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(addr)
        self._timer = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)(taddr)
        faddr = self._engine.get_function_address("__tt_flush")
        self._flush = (ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(faddr)
                       if faddr else None)
        gaddr = self._engine.get_global_value_address(self.entry_name + ".__nthreads")
        self._nthreads = ctypes.c_int32.from_address(gaddr)
        if self._nthreads.value <= 0:
            self._nthreads.value = cc.default_num_threads(None)

    # --------------------------------------------------------------------------- info
    @property
    def type_key(self) -> str:
        return "llvm"

    @property
    def num_threads(self) -> int:
        """Threads used by parallel loops."""
        return int(self._nthreads.value)

    def set_num_threads(self, n: int) -> None:
        """Set the thread count of parallel loops (1 runs them on the calling thread)."""
        if int(n) < 1:
            raise ValueError(f"num_threads must be >= 1, got {n}")
        self._nthreads.value = int(n)

    @property
    def params(self) -> tuple[ParamInfo, ...]:
        return self._params

    def get_source(self, fmt: str = "ll") -> str:
        """The generated LLVM IR (``"ll"``), the optimised IR (``"ll-opt"``) or assembly
        (``"asm"``/``"s"``)."""
        if fmt in ("ll", "llvm", ""):
            return self._ir
        if fmt in ("ll-opt", "opt"):
            return cc.optimised_ir(self._ir, self._spec)
        if fmt in ("asm", "s"):
            return cc.assembly(self._ir, self._spec)
        raise ValueError(f"unknown source format {fmt!r}; use 'll', 'll-opt' or 'asm'")

    def get_function(self, name: str) -> Module:
        if name != self.entry_name:
            raise AttributeError(f"module has no function {name!r} (entry is {self.entry_name!r})")
        return self

    __getitem__ = get_function

    def __repr__(self) -> str:
        return f"Module({self.entry_name!r}, params={[p.name for p in self._params]})"

    # --------------------------------------------------------------------------- calls
    def _check(self, arrays: tuple[Any, ...]) -> tuple[list[np.ndarray], list[int]]:
        return check_arguments(self.entry_name, self._params, self._shape_vars, arrays)

    def _fork_check(self) -> None:
        if self._runtime is ParallelRuntime.GOMP:
            fork_check(self._nthreads)

    def _check_runnable(self) -> None:
        # NOTE: running code for a CPU this host cannot execute kills the interpreter with
        # SIGILL; refuse with a clear error instead (building and exporting it stays allowed).
        missing = cc.missing_host_features(self._spec)
        if missing:
            raise RuntimeCallError(
                f"{self.entry_name} was compiled for cpu {self._spec.cpu!r}, which needs "
                f"{', '.join(missing)} that this host ({cc.host_spec().cpu}) lacks; build "
                "without -mcpu (or with this host's) to run it here")

    def __call__(self, *arrays: Any) -> None:
        """Run the function on ``arrays`` (outputs are written in place)."""
        self._check_runnable()
        arrs, svals = self._check(arrays)
        self._fork_check()
        self._raise_status(self._fn(*[a.ctypes.data for a in arrs], *svals))

    def bind(self, *arrays: Any) -> Callable[[], None]:
        """``run()`` that calls the function on ``arrays``: checked once here, not per call
        (what a network's runtime replays on the same buffers every inference)."""
        self._check_runnable()
        arrs, svals = self._check(arrays)
        fn, ptrs = self._fn, (*[a.ctypes.data for a in arrs], *svals)

        def run() -> None:
            self._fork_check()
            status = fn(*ptrs)
            if status:
                self._raise_status(status)

        run.arrays = arrs  # type: ignore[attr-defined]  # the pointers' owners stay alive
        return run

    def _raise_status(self, status: int) -> None:
        """Turn a non-zero kernel status into a :class:`RuntimeCallError`."""
        if status == KernelStatus.OK:
            return
        if status == KernelStatus.ALLOC_FAILED:
            raise RuntimeCallError(f"{self.entry_name}: a scratch buffer could not be allocated "
                                   "(out of memory); the outputs are not valid")
        raise RuntimeCallError(f"{self.entry_name} failed with status {status}")

    def _timed(self, slots: Any, n: int) -> float:
        """Seconds for ``n`` native calls; raises when a call failed."""
        r = self._timer(slots, n)
        if r < 0:
            self._raise_status(int(-r))
        return r

    def time_evaluator(self, func_name: str | None = None, dev: Any = None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: float = 0, enable_cpu_cache_flush: bool =
                       False, cooldown_interval_ms: float = 0,
                       f_preproc: str = "", limit_zero_time_iterations: int = 100,
                       warmup: int = 1) -> Callable[..., ProfileResult]:
        """A callable that times this function on given arguments, as TVM's time evaluator.

        ``warmup`` untimed warm-up calls (one by default, as TVM), then ``repeat`` rounds of
        ``number`` calls timed in native code. When a round takes less than ``min_repeat_ms``, ``number`` grows to
        ``max(min_repeat_ms / per_call_ms + 1, number * 1.618)`` and the round is re-timed; the
        grown ``number`` carries over to later rounds. ``enable_cpu_cache_flush`` (or
        ``f_preproc="cache_flush_cpu_non_first_arg"``) evicts every argument but the first from
        the caches before each round. ``warmup=0`` (templtune extension) suits a caller that has
        just run the function on the same arrays itself, like the AutoTVM runner's checking call.

        Returns
        -------
        callable
            ``f(*arrays) -> ProfileResult`` with ``results`` (seconds per call for each round),
            ``mean`` and ``median``.
        """
        if func_name not in (None, "", self.entry_name):
            raise AttributeError(f"module has no function {func_name!r}")
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got {number}, {repeat}")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        flush = enable_cpu_cache_flush or f_preproc == "cache_flush_cpu_non_first_arg"

        def evaluator(*arrays: Any) -> ProfileResult:
            self._check_runnable()
            arrs, svals = self._check(arrays)
            self._fork_check()
            slots = (ctypes.c_uint64 * max(1, len(arrs) + len(svals)))(
                *[a.ctypes.data for a in arrs], *[v & (2**64 - 1) for v in svals])
            if warmup:
                self._timed(slots, int(warmup))  # untimed warm-up
            n = int(number)
            results, numbers = [], []
            for _ in range(repeat):
                if flush and self._flush is not None:
                    for a in arrs[1:]:
                        self._flush(a.ctypes.data, a.nbytes)
                dur_ms, zeros = 0.0, 0
                while True:
                    if dur_ms > 0:
                        n = int(max(min_repeat_ms / (dur_ms / n) + 1, n * 1.618))
                    dur_ms = self._timed(slots, n) * 1e3
                    zeros += dur_ms == 0
                    if dur_ms >= min_repeat_ms or zeros >= limit_zero_time_iterations:
                        break
                results.append(dur_ms / 1e3 / n)
                numbers.append(n)
                if cooldown_interval_ms > 0:
                    time.sleep(cooldown_interval_ms / 1e3)
            return ProfileResult(float(np.mean(results)), tuple(results), tuple(numbers))

        return evaluator

    # ------------------------------------------------------------------------- transfer
    def export(self) -> bytes:
        """Object code plus a JSON header, for :func:`load_module` in another process (same
        machine type)."""
        head = json.dumps(self._header, separators=(",", ":")).encode()
        return _MAGIC + struct.pack("<I", len(head)) + head + self._obj

    def __reduce__(self) -> tuple[Any, ...]:
        # pickles as its exported object code (no re-optimisation when unpickled)
        return (load_module, (self.export(),))

    def export_library(self, path: str | os.PathLike[str], fcompile: Any = None,
                       options: Any = None) -> None:
        """Link the module into the ELF shared library ``path`` (with the C compiler, or
        ``fcompile(output, objects, options)``); :func:`load_module` and ctypes load it."""
        from templtune.runtime.library import export_library

        export_library(self, os.fspath(path), fcompile, options)

    def save(self, path: str | os.PathLike[str], fmt: str = "") -> None:
        """Write the module as an object file (``.o``, linkable with ``contrib.cc``), LLVM IR
        (``.ll``) or assembly (``.s``); ``fmt`` overrides the extension."""
        from templtune.runtime.library import save

        save(self, os.fspath(path), fmt)

    @property
    def imported_modules(self) -> list[Any]:
        """Device modules imported by this host module: none for an LLVM (CPU) module."""
        return []


def load_module(data: bytes | str | os.PathLike[str]) -> Module:
    """Re-create a :class:`Module` from :meth:`Module.export` bytes, a file holding them, or a
    shared library written by :meth:`Module.export_library`. Loading links the object code;
    nothing is re-optimised."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        with open(data, "rb") as f:
            head = f.read(4)
            if head == b"\x7fELF":  # a shared library from export_library / contrib.cc
                from templtune.runtime.library import load_shared

                return load_shared(os.fspath(data))
            data = head + f.read()
    data = bytes(data)
    if not data.startswith(_MAGIC):
        if data.startswith(_MAGIC[:-1]):
            raise CodegenError("module exported by another templtune version (calling "
                               "convention changed); rebuild it")
        raise CodegenError("not a templtune module (bad magic bytes)")
    (n,) = struct.unpack_from("<I", data, len(_MAGIC))
    start = len(_MAGIC) + 4
    header = json.loads(data[start:start + n])
    return Module(data[start + n:], header)


@register_loader("llvm")
def load_llvm(artifact: LLVMArtifact) -> Module:
    """Load the object code of an LLVM build into this process."""
    return Module(artifact.obj, artifact.header)
