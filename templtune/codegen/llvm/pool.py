"""templtune's own thread pool for parallel loops (x86-64 Linux), in LLVM IR.

A kernel's ``parallel`` loop is outlined into ``fn(ctx)`` whose callers claim chunks of
iterations from a shared counter until none are left (:meth:`render._Fn.parallel_for`), so any
number of threads, one included, computes it completely. ``templtune_parallel_launch(fn, ctx,
nthreads)`` publishes the job, wakes sleeping workers, runs ``fn(ctx)`` on the calling thread,
then *closes* the job and waits only for the workers that joined it. A worker that has not
started by then never joins (ONNX Runtime's pool revokes unstarted work the same way).

Why not libgomp: ``GOMP_parallel`` ends with a barrier that waits for every worker. On a small
KVM guest the worker woken for a call is often queued on the caller's own vCPU (the idle vCPU
looks preempted to the guest scheduler), so the caller, done with all the chunks, spins at the
barrier until the worker gets that CPU: milliseconds for a call of microseconds
(``benchmarks/studies/gomp_wake.py``). Here the caller returns as soon as the work is done, and
a worker that finds itself on the caller's CPU moves off it (``tt_pool.unstack``); a caller
that had to wake workers gives its CPU away once, so that one queued behind it gets to move.

The pool's state is one set of globals per copy of this module: one JIT-compiled copy per
process (:func:`ensure_pool`), and one linked into each exported library (:func:`pool_object`).
A call from a second thread while the pool is busy, and any call in a forked child before
:func:`_reset_in_child` has run, computes the loop alone, so no interleaving of callers can
deadlock. Workers spin ``TEMPLTUNE_POOL_SPIN`` pauses for the next job, then sleep on a futex;
with ``TEMPLTUNE_BIND_THREADS`` worker ``k`` is pinned to the ``k + 1``-th CPU of
:func:`~templtune.codegen.llvm.affinity.cpu_order` (the caller stays free).
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys
import threading
from typing import Any

import llvmlite.binding as llvm

from templtune import config
from templtune.codegen.llvm.abi import ParallelRuntime
from templtune.codegen.llvm.pool_ir import LAUNCH, pool_ir

log = logging.getLogger("templtune.codegen.llvm")

__all__ = ["LAUNCH", "available", "ensure_pool", "parallel_runtime", "pool_object"]

def available() -> bool:
    """Whether this process can run the pool (x86-64 Linux: futex and syscall numbers)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def parallel_runtime(spec: Any) -> ParallelRuntime:
    """What a kernel built now for ``spec`` (a ``MachineSpec``) runs its parallel loops on:
    the pool where ``TEMPLTUNE_THREAD_POOL`` asks for it and the code is for x86-64 Linux,
    else libgomp where it loads, else serial loops."""
    if (config.get("TEMPLTUNE_THREAD_POOL") == "templtune" and spec.triple.startswith("x86_64")
            and "linux" in spec.triple):
        return ParallelRuntime.POOL
    from templtune.codegen.llvm import compile as cc

    return ParallelRuntime.GOMP if cc.load_libgomp() else ParallelRuntime.SERIAL


def _spin() -> int:
    return int(config.get("TEMPLTUNE_POOL_SPIN"))


def pool_object(spec: Any) -> bytes:
    """Object code of a copy of the pool for ``spec``'s machine, to link into an exported
    library whose kernels call :data:`LAUNCH`."""
    from templtune.codegen.llvm import compile as cc

    return cc.compile_ir(pool_ir(_spin()), spec)


class _Pool:
    """The process's JIT-compiled pool (kept alive with its engine)."""

    lock = threading.Lock()
    engine: Any = None
    reset: Any = None


def _cpu_list() -> list[int]:
    from templtune.codegen.llvm import affinity

    if not config.get("TEMPLTUNE_BIND_THREADS") or not hasattr(os, "sched_getaffinity"):
        return []
    if any(config.get(v) for v in affinity.USER_OMP_VARIABLES):
        return []
    return affinity.cpu_order(os.sched_getaffinity(0))


def _reset_in_child() -> None:
    # the parent's workers do not exist in a forked child: forget them (it grows its own)
    if _Pool.reset is not None:
        _Pool.reset()


def ensure_pool() -> None:
    """JIT-compile the process's pool once and make :data:`LAUNCH` resolve to it in every
    module loaded afterwards."""
    if _Pool.engine is not None:
        return
    with _Pool.lock:
        if _Pool.engine is not None:
            return
        from templtune.codegen.llvm import compile as cc

        obj = pool_object(cc.host_spec())
        host = llvm.parse_assembly("", context=llvm.create_context())
        host.triple = cc.host_spec().triple
        engine = llvm.create_mcjit_compiler(host, cc.new_target_machine(cc.host_spec()))
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        cpus = _cpu_list()
        arr = (ctypes.c_int32 * max(1, len(cpus)))(*cpus)
        configure = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)(
            engine.get_function_address("templtune_pool_configure"))
        configure(_spin(), ctypes.addressof(arr), len(cpus))
        _Pool.reset = ctypes.CFUNCTYPE(None)(engine.get_function_address("templtune_pool_reset"))
        llvm.add_symbol(LAUNCH, engine.get_function_address(LAUNCH))
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_reset_in_child)
        # NOTE: the engine owns the workers' code; freeing it at interpreter shutdown while a
        # worker still spins in it would crash the exit, so it is never freed (one leaked ref)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))
        _Pool.engine = engine
        log.debug("thread pool ready (spin %d, pinned to %s)", _spin(), cpus or "no CPUs")
