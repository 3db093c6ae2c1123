"""``build_cuda``: loop IR -> kernels -> resource check -> CUDA C -> nvcc -> :class:`CudaModule`.

The module is plain picklable data (source, binary, launch shapes), so a builder process can
hand it to a measurement process; the GPU runtime is imported only when the module is run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.codegen.cuda.allreduce import lower_cross_thread_reduction
from templtune.codegen.cuda.analysis import buffer_size, fold_constants
from templtune.codegen.cuda.compile import compile_cuda, find_nvcc
from templtune.codegen.cuda.kernel import Kernel, merge_adjacent_guards, split_kernels
from templtune.codegen.cuda.render import render_module
from templtune.codegen.cuda.sync import insert_shared_sync
from templtune.codegen.cuda.unroll import apply_unroll
from templtune.codegen.cuda.vthread import inject_virtual_threads
from templtune.errors import InstantiationError
from templtune.lower.ir import Buffer, PrimFunc
from templtune.te.expr import PrimExpr

log = logging.getLogger("templtune.codegen.cuda")


@dataclass(frozen=True, slots=True)
class CudaLimits:
    """Per-block resource limits of a CUDA device (defaults: compute capability 9.0)."""

    arch: str = "sm_90"
    max_threads_per_block: int = 1024
    max_thread_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    # NOTE: statically declared __shared__ arrays are limited to 48 KiB whatever the chip;
    # more needs dynamic shared memory and an opt-in attribute, which this backend does not use.
    max_shared_memory_per_block: int = 49152
    max_registers_per_block: int = 65536
    # NOTE: not a hardware limit: past 255 registers a thread spills, and a kernel whose local
    # arrays need this many words per thread is hopeless; rejecting it early (templtune's
    # choice, TVM builds it) saves the passes and nvcc minutes on giant vthread-expanded code.
    max_local_words_per_thread: int = 1024


def limits_from_target(target: Any) -> CudaLimits:
    """Read the limits from a ``templtune.target.Target`` (or its string); missing attributes
    keep the sm_90 defaults."""
    if target is None:
        return CudaLimits()
    if isinstance(target, str):
        try:
            from templtune.target import Target

            target = Target(target)
        except ImportError:
            return CudaLimits()
    attrs = getattr(target, "attrs", None) or {}

    def get(name: str, default: Any) -> Any:
        v = getattr(target, name, None)
        if v is None and isinstance(attrs, dict):
            v = attrs.get(name)
        return default if v is None or v == -1 else v

    d = CudaLimits()
    arch = str(get("arch", d.arch))
    if not arch.startswith("sm_"):
        arch = "sm_" + arch.replace(".", "")
    return CudaLimits(
        arch=arch,
        max_threads_per_block=int(get("max_threads_per_block", d.max_threads_per_block)),
        max_shared_memory_per_block=int(get("max_shared_memory_per_block",
                                            d.max_shared_memory_per_block)),
        max_registers_per_block=int(get("max_registers_per_block", d.max_registers_per_block)),
    )


def check_limits(kernels: list[Kernel], lim: CudaLimits) -> None:
    """Raise :class:`InstantiationError` naming the first kernel over a resource limit."""
    for k in kernels:
        n = k.threads_per_block
        if n > lim.max_threads_per_block:
            raise InstantiationError(f"{k.name}: {n} threads per block > limit "
                                     f"{lim.max_threads_per_block} (block {k.block})")
        for axis, (got, cap) in enumerate(zip(k.block, lim.max_thread_dims)):
            if got > cap:
                raise InstantiationError(f"{k.name}: threadIdx.{'xyz'[axis]} extent {got} > {cap}")
        for axis, (got, cap) in enumerate(zip(k.grid, lim.max_grid_dims)):
            if got > cap:
                raise InstantiationError(f"{k.name}: blockIdx.{'xyz'[axis]} extent {got} > {cap}")
        if k.shared_bytes > lim.max_shared_memory_per_block:
            raise InstantiationError(f"{k.name}: {k.shared_bytes} bytes of shared memory > limit "
                                     f"{lim.max_shared_memory_per_block}")
        if k.local_words > lim.max_local_words_per_thread:
            raise InstantiationError(f"{k.name}: local arrays need {k.local_words} words per "
                                     f"thread > {lim.max_local_words_per_thread}")
        regs = k.local_words * n
        if regs > lim.max_registers_per_block:
            raise InstantiationError(
                f"{k.name}: local arrays need {k.local_words} registers per thread x {n} threads "
                f"= {regs} > {lim.max_registers_per_block} registers per block")


def precheck(func: PrimFunc, lim: CudaLimits) -> None:
    """Cheap resource estimate on the IR before the (possibly expensive) passes: threads per
    block, shared bytes and local words per thread with vthread expansion."""
    from templtune.codegen.cuda.analysis import node_children
    from templtune.codegen.cuda.kernel import THREAD_TAGS, is_vthread
    from templtune.lower.ir import Allocate, For, ForKind
    from templtune.te.expr import const_int

    threads: dict[str, int] = {}
    local: dict[Buffer, int] = {}
    shared: dict[Buffer, int] = {}
    stack: list[tuple[Any, int]] = [(func.body, 1)]
    while stack:
        node, vt = stack.pop()
        if isinstance(node, For) and node.kind is ForKind.THREAD_BINDING:
            ext = const_int(node.extent) or 1
            if is_vthread(node.thread_tag):
                vt *= ext
            elif node.thread_tag in THREAD_TAGS:
                threads[node.thread_tag] = max(threads.get(node.thread_tag, 1), ext)
        elif isinstance(node, Allocate):
            try:
                size = buffer_size(node.buffer)
            except Exception:  # noqa: BLE001 - symbolic sizes are reported later
                size = 0
            if node.buffer.scope == "local":
                local[node.buffer] = max(local.get(node.buffer, 0), size * vt)
            elif node.buffer.scope == "shared":
                shared[node.buffer] = size * dt.itemsize(node.buffer.dtype)
        stack.extend((c, vt) for c in node_children(node) if not isinstance(c, PrimExpr))
    n = 1
    for v in threads.values():
        n *= v
    if n > lim.max_threads_per_block:
        raise InstantiationError(f"{func.name}: {n} threads per block > limit "
                                 f"{lim.max_threads_per_block}")
    sh = sum(shared.values())
    if sh > lim.max_shared_memory_per_block:
        raise InstantiationError(f"{func.name}: {sh} bytes of shared memory > limit "
                                 f"{lim.max_shared_memory_per_block}")
    words = sum(local.values())
    if words > lim.max_local_words_per_thread:
        raise InstantiationError(
            f"{func.name}: local arrays need {words} words per thread (vthreads included) > "
            f"{lim.max_local_words_per_thread}")
    if words * n > lim.max_registers_per_block:
        raise InstantiationError(f"{func.name}: local arrays need {words} registers per thread "
                                 f"x {n} threads > {lim.max_registers_per_block} per block")


def lower_to_kernels(func: PrimFunc, insert_sync: bool = True) -> tuple[list[Kernel], list[Buffer]]:
    """Run the CUDA pipeline on ``func``: vthread injection, unrolling, kernel split with
    launch extraction, barrier insertion (skipped with ``insert_sync=False``, for tests)."""
    body = fold_constants(apply_unroll(inject_virtual_threads(func.body)))
    body = lower_cross_thread_reduction(body)
    kernels, workspace = split_kernels(replace(func, body=body))
    if insert_sync:
        kernels = [insert_shared_sync(k) for k in kernels]
    return [merge_adjacent_guards(k) for k in kernels], workspace


@dataclass(frozen=True, slots=True)
class ParamInfo:
    """A kernel-module argument: a buffer of the function, or a workspace it allocates."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How to launch one kernel: ``args`` index the module's params then its workspace."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[int, ...]
    shared_bytes: int


def _shape(b: Buffer) -> tuple[int, ...]:
    from templtune.te.expr import const_int

    dims = tuple(const_int(s) for s in b.shape)
    return tuple(-1 if d is None else d for d in dims)  # type: ignore[misc]


class CudaModule:
    """A built CUDA function: ``get_source()``, launch shapes, and (with a GPU) a callable.

    Calling it with numpy arrays copies them to the device, launches every kernel in order and
    copies every argument back in place; ``time_evaluator`` times the launches with CUDA events.
    """

    type_key = "cuda"

    def __init__(self, entry_name: str, source: str, launches: tuple[LaunchSpec, ...],
                 params: tuple[ParamInfo, ...], workspace: tuple[ParamInfo, ...],
                 binary: bytes | None, arch: str, kernels: tuple[Kernel, ...] = ()) -> None:
        self.entry_name = entry_name
        self.source = source
        self.launches = launches
        self.params = params
        self.workspace = workspace
        self.binary = binary
        self.arch = arch
        self.kernels = kernels

    # NOTE: pickles (builder -> runner process) carry source, binary and launch shapes; the
    # kernel IR (only needed to emulate) stays behind unless ``keep_ir`` is set or the
    # emulator backend is selected (TEMPLTUNE_CUDA_BACKEND=emulator), and loaded
    # driver handles never travel.
    keep_ir = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_loaded", None)
        import os

        keep = state.get("keep_ir", False) or os.environ.get("TEMPLTUNE_CUDA_BACKEND") == "emulator"
        if not keep:
            state["kernels"] = ()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        ks = ", ".join(f"{s.name}<<<{s.grid}, {s.block}>>>" for s in self.launches)
        return f"CudaModule({self.entry_name}: {ks})"

    @property
    def imported_modules(self) -> list[CudaModule]:
        """``[self]``: a CUDA module is its own host and device module here, so TVM's
        ``f.imported_modules[0].get_source()`` gives the CUDA C."""
        return [self]

    def get_source(self, fmt: str = "cuda") -> str:
        """``"cuda"``/``"cu"``: the CUDA C; ``"ptx"``: PTX compiled by nvcc now."""
        if fmt in ("cuda", "cu", ""):
            return self.source
        if fmt == "ptx":
            return compile_cuda(self.source, self.arch, "ptx").decode()
        raise ValueError(f"unknown source format {fmt!r}; expected 'cuda' or 'ptx'")

    def emulate(self, *arrays: np.ndarray, check_races: bool = True) -> None:
        """Run the kernels on the CPU (see :mod:`templtune.codegen.cuda.emulate`)."""
        from templtune.codegen.cuda.emulate import run_module

        run_module(self, arrays, check_races=check_races)

    def __call__(self, *args: Any) -> None:
        from templtune.runtime.cuda.launcher import run

        run(self, args)

    def time_evaluator(self, func_name: str | None = None, dev: Any = None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: float = 0, **_: Any) -> Any:
        """A callable timing the module on the GPU; its result has ``.results`` (seconds per
        call, one per repeat) and ``.mean``. Same number/repeat/min_repeat_ms semantics as the
        CPU time evaluator."""
        from templtune.runtime.cuda.launcher import time_evaluator

        return time_evaluator(self, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)


def build_cuda(func: PrimFunc, target: Any = None, *, compile: bool | None = None,
               fmt: str = "cubin") -> CudaModule:
    """Build ``func`` (GPU-bound loop IR) for CUDA.

    Parameters
    ----------
    func : PrimFunc
        Lowered function whose outer loops are bound to blockIdx/threadIdx.
    target : Target or str, optional
        Supplies ``arch`` and the per-block limits; sm_90 defaults when omitted.
    compile : bool, optional
        Run nvcc (default: when nvcc is installed). Without it the module has source only.
    fmt : str
        ``"cubin"`` (default) or ``"ptx"``.

    Raises
    ------
    InstantiationError
        A kernel exceeds the threads, shared memory or registers per block of the target.
    CodegenError
        The IR cannot be expressed in CUDA, or nvcc rejects the generated source.
    """
    lim = limits_from_target(target)
    precheck(func, lim)
    kernels, workspace = lower_to_kernels(func)
    check_limits(kernels, lim)
    source = render_module(kernels)
    order = list(func.params) + workspace
    launches = tuple(
        LaunchSpec(k.name, k.grid, k.block, tuple(order.index(b) for b in k.params),
                   k.shared_bytes)
        for k in kernels)
    params = tuple(ParamInfo(b.name, b.dtype, _shape(b)) for b in func.params)
    ws = tuple(ParamInfo(b.name, b.dtype, (buffer_size(b),)) for b in workspace)
    do_compile = find_nvcc() is not None if compile is None else compile
    binary = compile_cuda(source, lim.arch, fmt) if do_compile else None
    if binary is None:
        log.debug("nvcc not used for %s; the module carries source only", func.name)
    return CudaModule(func.name, source, launches, params, ws, binary, lim.arch, tuple(kernels))

