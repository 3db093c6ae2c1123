"""The CUDA backend's :class:`~templtune.codegen.registry.Codegen`: loop IR -> kernels ->
resource check -> CUDA C (``render``) -> nvcc (``compile``) -> :class:`CudaArtifact`.

The artifact is plain picklable data (source, binary, launch shapes, kernel IR), so a builder
process can hand it to a measurement process; :class:`templtune.runtime.cuda.module.CudaModule`
wraps it for running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from templtune import dtype as dt
from templtune.codegen.cuda.allreduce import lower_cross_thread_reduction
from templtune.codegen.cuda.analysis import buffer_size, fold_constants
from templtune.codegen.cuda.compile import compile_cuda, find_nvcc
from templtune.codegen.cuda.kernel import Kernel, merge_adjacent_guards, split_kernels
from templtune.codegen.cuda.render import render_module
from templtune.codegen.cuda.sync import insert_shared_sync
from templtune.codegen.cuda.unroll import apply_unroll
from templtune.codegen.cuda.vthread import inject_virtual_threads
from templtune.codegen.registry import Codegen, register_codegen
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
    """The limits of a CUDA ``templtune.target.Target`` (or its string), from its capability
    record; without ``-arch``, sm_90."""
    if target is None:
        return CudaLimits()
    from templtune.target import capabilities

    caps = capabilities(target)
    d = CudaLimits()
    return CudaLimits(arch=caps.arch or d.arch, max_threads_per_block=caps.max_threads_per_block,
                      max_shared_memory_per_block=caps.max_shared_memory_per_block,
                      max_registers_per_block=caps.max_registers_per_block)


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
        for axis, (g, cap) in enumerate(zip(k.grid, lim.max_grid_dims)):
            if isinstance(g, int) and g > cap:  # the driver refuses a symbolic one at launch
                raise InstantiationError(f"{k.name}: blockIdx.{'xyz'[axis]} extent {g} > {cap}")
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
    block, shared bytes and local words per thread with vthread expansion, per kernel (each
    outermost thread-bound loop nest starts one)."""
    from templtune.codegen.cuda.analysis import node_children
    from templtune.codegen.cuda.kernel import THREAD_TAGS, is_vthread
    from templtune.lower.ir import Allocate, For, ForKind
    from templtune.te.expr import const_int

    threads: dict[tuple[int, str], int] = {}
    local: dict[tuple[int, Buffer], int] = {}
    shared: dict[tuple[int, Buffer], int] = {}
    n_kernels = 0
    # NOTE: kernel -1 is host code around the kernels (allocations outside any launch)
    stack: list[tuple[Any, int, int]] = [(func.body, 1, -1)]
    while stack:
        node, vt, kid = stack.pop()
        if isinstance(node, For) and node.kind is ForKind.THREAD_BINDING:
            if kid < 0:
                kid, n_kernels = n_kernels, n_kernels + 1
            ext = const_int(node.extent) or 1
            if is_vthread(node.thread_tag):
                vt *= ext
            elif node.thread_tag in THREAD_TAGS:
                key = (kid, node.thread_tag)
                threads[key] = max(threads.get(key, 1), ext)
        elif isinstance(node, Allocate):
            try:
                size = buffer_size(node.buffer)
            except Exception:  # noqa: BLE001 - symbolic sizes are reported later
                size = 0
            if node.buffer.scope == "local":
                local[kid, node.buffer] = max(local.get((kid, node.buffer), 0), size * vt)
            elif node.buffer.scope == "shared":
                shared[kid, node.buffer] = size * dt.itemsize(node.buffer.dtype)
        stack.extend((c, vt, kid) for c in node_children(node) if not isinstance(c, PrimExpr))
    for kid in range(-1, n_kernels):
        n = 1
        for (k, _), v in threads.items():
            n *= v if k == kid else 1
        sh = sum(v for (k, _), v in shared.items() if k == kid)
        words = sum(v for (k, _), v in local.items() if k == kid)
        _check_estimate(func.name, n, sh, words, lim)


def _check_estimate(name: str, n: int, sh: int, words: int, lim: CudaLimits) -> None:
    if n > lim.max_threads_per_block:
        raise InstantiationError(f"{name}: {n} threads per block > limit "
                                 f"{lim.max_threads_per_block}")
    if sh > lim.max_shared_memory_per_block:
        raise InstantiationError(f"{name}: {sh} bytes of shared memory > limit "
                                 f"{lim.max_shared_memory_per_block}")
    if words > lim.max_local_words_per_thread:
        raise InstantiationError(
            f"{name}: local arrays need {words} words per thread (vthreads included) > "
            f"{lim.max_local_words_per_thread}")
    if words * n > lim.max_registers_per_block:
        raise InstantiationError(f"{name}: local arrays need {words} registers per thread "
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
    # ints, or the names of the shape variables bound from the arrays at call time
    shape: tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How to launch one kernel: ``args`` index the module's params then its workspace;
    ``scalars`` name the shape variables passed after them. A block dimension of a symbolic
    shape is an expression of the shape variables, evaluated at launch."""

    name: str
    grid: tuple[int | PrimExpr, int | PrimExpr, int | PrimExpr]
    block: tuple[int, int, int]
    args: tuple[int, ...]
    shared_bytes: int
    scalars: tuple[tuple[str, str], ...] = ()  # (name, dtype)


def _shape(b: Buffer) -> tuple[int | str, ...]:
    from templtune.te.expr import Var, const_int

    out: list[int | str] = []
    for s in b.shape:
        d = const_int(s)
        out.append(d if d is not None else (s.name if type(s) is Var else -1))
    return tuple(out)




@dataclass(frozen=True, slots=True)
class CudaSource:
    """Rendered CUDA C of one function with its kernels and launch shapes."""

    entry_name: str
    source: str
    kernels: tuple[Kernel, ...]
    launches: tuple[LaunchSpec, ...]
    params: tuple[ParamInfo, ...]
    workspace: tuple[ParamInfo, ...]
    arch: str


@dataclass(frozen=True, slots=True)
class CudaArtifact:
    """A compiled CUDA function: source, nvcc output (``None`` without nvcc) and launches."""

    entry_name: str
    source: str
    launches: tuple[LaunchSpec, ...]
    params: tuple[ParamInfo, ...]
    workspace: tuple[ParamInfo, ...]
    binary: bytes | None
    arch: str
    kernels: tuple[Kernel, ...] = ()


@register_codegen("cuda")
class CudaCodegen(Codegen):
    """Loop IR bound to blockIdx/threadIdx -> CUDA C -> cubin (or PTX) through nvcc.

    Kernels are named after ``func.name``. ``render`` raises :class:`InstantiationError` for a
    kernel over the target's per-block limits, before nvcc runs.
    """

    def render(self, func: PrimFunc, target: Any, name: str | None = None) -> CudaSource:
        lim = limits_from_target(target)
        precheck(func, lim)
        kernels, workspace = lower_to_kernels(func)
        check_limits(kernels, lim)
        source = render_module(kernels)
        order = list(func.params) + workspace
        launches = tuple(
            LaunchSpec(k.name, k.grid, k.block, tuple(order.index(b) for b in k.params),
                       k.shared_bytes, tuple((v.name, v.dtype) for v in k.scalars))
            for k in kernels)
        params = tuple(ParamInfo(b.name, b.dtype, _shape(b)) for b in func.params)
        ws = tuple(ParamInfo(b.name, b.dtype, (buffer_size(b),)) for b in workspace)
        return CudaSource(func.name, source, tuple(kernels), launches, params, ws, lim.arch)

    def compile(self, rendered: CudaSource, target: Any,
                timings: dict[str, float] | None = None) -> CudaArtifact:
        return self.assemble(rendered)

    def assemble(self, rendered: CudaSource, compile: bool | None = None,
                 fmt: str = "cubin") -> CudaArtifact:
        """Run nvcc on ``rendered`` (``compile``: default when nvcc is installed)."""
        do_compile = find_nvcc() is not None if compile is None else compile
        binary = compile_cuda(rendered.source, rendered.arch, fmt) if do_compile else None
        if binary is None:
            log.debug("nvcc not used for %s; the module carries source only",
                      rendered.entry_name)
        return CudaArtifact(rendered.entry_name, rendered.source, rendered.launches,
                            rendered.params, rendered.workspace, binary, rendered.arch,
                            rendered.kernels)
