"""LLVM IR text -> optimised native object code (llvmlite), with a compile cache.

The object file is the build artifact: the builder process JIT-loads it directly, and it is also
what :meth:`templtune.runtime.Module.export` ships to a measurement process, so loading never
re-optimises.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

from templtune import config
from templtune.codegen.llvm import affinity
from templtune.errors import CodegenError, TargetError
from templtune.target import Target, capabilities
from templtune.target.llvm_cpu import cpu_isa, host_cpu
from templtune.target.record import Capabilities

log = logging.getLogger("templtune.codegen.llvm")

_LOCK = threading.Lock()
# NOTE: a process-local cache of object code keyed by a hash of (IR text, target machine); it only
# saves work on repeated identical builds and never changes results, so it is safe in workers.
_CACHE: OrderedDict[str, bytes] = OrderedDict()
_CACHE_SIZE = 256


@dataclass(frozen=True, slots=True)
class MachineSpec:
    """What the object code is compiled for."""

    triple: str
    cpu: str
    features: str
    opt_level: int = 3

    @property
    def is_x86(self) -> bool:
        return self.triple.startswith(("x86_64", "i686", "i386"))


@lru_cache(maxsize=1)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@lru_cache(maxsize=1)
def host_spec() -> MachineSpec:
    """The host CPU as LLVM sees it (name and feature string)."""
    h = host_cpu()
    return MachineSpec(h.triple, h.name, h.features)


def has_avx512(target: object | None = None) -> bool:
    """Whether code for the ``llvm`` ``target`` may use AVX-512 (its capability record)."""
    return _caps(target).has_avx512


def _caps(target: object | None) -> Capabilities:
    # NOTE: None (or a non-target object) is the host, whatever target is in scope.
    return capabilities(target if isinstance(target, Target | str) else "llvm")


@lru_cache(maxsize=64)
def missing_host_features(spec: MachineSpec) -> tuple[str, ...]:
    """What ``spec``'s object code needs that this host lacks (empty when it can run here).

    Checks the triple and the ISA features of the capability record (the CPU's and the
    ``+feature`` flags). Only features the host's detection reports (as present or absent)
    count: the others are LLVM's tuning flags (``prefer-256-bit``), which any host runs.
    """
    host = host_spec()
    if spec.triple != host.triple:
        return (f"triple {spec.triple}",)
    flags = [f for f in host.features.split(",") if f[:1] in ("+", "-")]
    have = {f[1:] for f in flags if f.startswith("+")}
    known = {f[1:] for f in flags}
    need = {f[1:] for f in spec.features.split(",") if f.startswith("+")}
    if spec.cpu != host.cpu:
        need |= cpu_isa(spec.cpu, spec.features)
    return tuple(sorted((need & known) - have))


def machine_spec(target: object | None = None) -> MachineSpec:
    """The machine spec of an ``llvm`` :class:`~templtune.target.Target` (None: the host):
    the triple, CPU and feature string of its capability record, and ``-opt-level``."""
    caps = _caps(target)
    attrs = getattr(target, "attrs", {}) or {}
    return MachineSpec(caps.triple, caps.cpu, caps.llvm_features, int(attrs.get("opt-level", 3)))


@lru_cache(maxsize=16)
def target_machine(spec: MachineSpec) -> llvm.TargetMachine:
    """A shared target machine for compiling (never hand it to an execution engine)."""
    return new_target_machine(spec)


def new_target_machine(spec: MachineSpec) -> llvm.TargetMachine:
    """A fresh target machine (an MCJIT engine takes ownership of the one it is given)."""
    _init()
    try:
        tgt = llvm.Target.from_triple(spec.triple)
    except RuntimeError as e:
        raise TargetError(f"LLVM cannot generate code for triple {spec.triple!r}: {e}") from None
    return tgt.create_target_machine(cpu=spec.cpu, features=spec.features, opt=spec.opt_level,
                                     reloc="pic", codemodel="jitdefault")


def _parse_verify(ir: str, spec: MachineSpec) -> llvm.ModuleRef:
    _init()
    try:
        # NOTE: a fresh context per module, so that constants and types of thousands of tuning
        # builds do not pile up in LLVM's global context.
        mod = llvm.parse_assembly(ir, context=llvm.create_context())
        mod.verify()
    except RuntimeError as e:
        if config.get("TEMPLTUNE_DEBUG"):
            log.error("invalid LLVM IR:\n%s", ir)
        raise CodegenError(f"generated LLVM IR is invalid: {str(e).strip()}") from None
    mod.triple = spec.triple
    mod.data_layout = str(target_machine(spec).target_data)
    return mod


def _optimise(mod: llvm.ModuleRef, spec: MachineSpec) -> None:
    tm = target_machine(spec)
    pto = llvm.create_pipeline_tuning_options(speed_level=spec.opt_level)
    # NOTE: vectorization and unrolling are the schedule's decisions (Ramp/Broadcast vector IR,
    # UNROLLED loops carrying llvm.loop.unroll.full, VECTORIZED loops carrying vectorize.enable).
    # LLVM's own loop vectorizer and partial/runtime unroller then only act when forced by that
    # metadata, which keeps compile time low and kernels predictable; SLP stays on to pack
    # scalar code that the schedule unrolled.
    pto.loop_vectorization = False
    pto.loop_unrolling = False
    pto.slp_vectorization = spec.opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_ir(ir: str, spec: MachineSpec, timings: dict[str, float] | None = None) -> bytes:
    """Verify, optimise (new pass manager) and emit object code for ``ir``.

    Parameters
    ----------
    ir : str
        LLVM IR text.
    spec : MachineSpec
        Target triple, CPU and features.
    timings : dict, optional
        Filled with seconds spent in ``parse_verify``, ``optimise`` and ``codegen`` (zero on a
        cache hit, with ``cache_hit`` set to 1).

    Raises
    ------
    CodegenError
        When the LLVM verifier rejects the IR.
    """
    key = hashlib.sha256(f"{spec}\n{ir}".encode()).hexdigest()
    with _LOCK:
        obj = _CACHE.get(key)
        if obj is not None:
            _CACHE.move_to_end(key)
    if obj is not None:
        if timings is not None:
            timings.update(parse_verify=0.0, optimise=0.0, codegen=0.0, cache_hit=1)
        return obj
    t0 = time.perf_counter()
    mod = _parse_verify(ir, spec)
    t1 = time.perf_counter()
    _optimise(mod, spec)
    t2 = time.perf_counter()
    obj = target_machine(spec).emit_object(mod)
    t3 = time.perf_counter()
    if timings is not None:
        timings.update(parse_verify=t1 - t0, optimise=t2 - t1, codegen=t3 - t2, cache_hit=0)
    with _LOCK:
        _CACHE[key] = obj
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return obj


def clear_cache() -> None:
    """Forget every cached object file (benchmarks use it to time cold builds)."""
    with _LOCK:
        _CACHE.clear()


def optimised_ir(ir: str, spec: MachineSpec) -> str:
    """The IR after the O3 pipeline (for inspection)."""
    mod = _parse_verify(ir, spec)
    _optimise(mod, spec)
    return str(mod)


def assembly(ir: str, spec: MachineSpec) -> str:
    """Native assembly of ``ir`` after optimisation."""
    mod = _parse_verify(ir, spec)
    _optimise(mod, spec)
    return target_machine(spec).emit_assembly(mod)


# ----------------------------------------------------------------------------- libgomp


#: distributions whose wheels bundle libgomp (auditwheel's ``<dist>.libs`` folder), in order.
_GOMP_DISTRIBUTIONS = ("xgboost-cpu", "xgboost", "scikit-learn")


def _bundled_libgomp(dist_name: str) -> str | None:
    """The libgomp a wheel of ``dist_name`` installed, from its own file list (RECORD); None
    when the distribution is absent or ships none."""
    from importlib import metadata

    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None
    for f in sorted(dist.files or (), key=str):
        if os.path.basename(str(f)).startswith("libgomp") and ".so" in str(f):
            path = str(dist.locate_file(f))
            if os.path.exists(path):
                return path
    return None


def _libgomp_next_to_xgboost() -> str | None:
    """libgomp in the folders next to the ``xgboost`` package (``xgboost_cpu.libs``,
    ``xgboost.libs``, ``xgboost/lib``), found without importing xgboost; covers installs
    without a RECORD file."""
    import importlib.util

    spec = importlib.util.find_spec("xgboost")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = list(spec.submodule_search_locations)[0]
    site = os.path.dirname(pkg)
    for folder in (os.path.join(site, "xgboost_cpu.libs"), os.path.join(site, "xgboost.libs"),
                   os.path.join(pkg, "lib")):
        hits = sorted(glob.glob(os.path.join(folder, "libgomp*.so*")))
        if hits:
            return hits[0]
    return None


@lru_cache(maxsize=1)
def find_libgomp() -> str | None:
    """Path of a libgomp shared library, or None when none is found.

    Looked up in order: ``TEMPLTUNE_LIBGOMP``; the copy bundled by the xgboost-cpu wheel (a
    core dependency; found from the wheel's own file list, then next to the package); the one
    of xgboost or scikit-learn when installed; the system library.

    Raises
    ------
    CodegenError
        ``TEMPLTUNE_LIBGOMP`` is set to a path that does not exist.
    """
    env = config.get("TEMPLTUNE_LIBGOMP")
    if env is not None:
        if not env.exists():
            raise CodegenError(f"TEMPLTUNE_LIBGOMP={str(env)!r}: no such file; point it at a "
                               "libgomp shared library or unset it")
        return str(env)
    for dist in _GOMP_DISTRIBUTIONS:
        path = _bundled_libgomp(dist)
        if path is not None:
            return path
    path = _libgomp_next_to_xgboost()
    if path is not None:
        return path
    import ctypes.util

    return ctypes.util.find_library("gomp")


@lru_cache(maxsize=1)
def load_libgomp() -> bool:
    """Make libgomp's symbols visible to JIT code (idempotent). False, with one warning, when
    libgomp is unavailable: parallel loops then run serially."""
    path = find_libgomp()
    if path is None:
        log.warning("libgomp not found (neither bundled with xgboost-cpu nor installed on the "
                    "system): parallel loops will run serially; reinstall xgboost-cpu, install "
                    "libgomp1, or set TEMPLTUNE_LIBGOMP to a libgomp shared library")
        return False
    try:
        with affinity.binding_environment() as asked:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        if asked and not affinity.binding_active(lib):
            log.debug("libgomp at %s was loaded before templtune set its thread binding: "
                      "workers are not pinned", path)
        _init()
        llvm.load_library_permanently(path)
    except (OSError, RuntimeError) as e:
        log.warning("cannot load libgomp from %s (%s): parallel loops will run serially", path, e)
        return False
    return True


def default_num_threads(target: object | None = None) -> int:
    """Threads for parallel loops: target ``-num-cores``, else ``TEMPLTUNE_NUM_THREADS``, else
    ``TVM_NUM_THREADS`` (so TVM users' settings carry over), else the CPU count."""
    attrs = getattr(target, "attrs", {}) or {}
    if attrs.get("num-cores"):
        return int(attrs["num-cores"])
    env = config.get("TEMPLTUNE_NUM_THREADS")
    return int(env) if env is not None else (os.cpu_count() or 1)
