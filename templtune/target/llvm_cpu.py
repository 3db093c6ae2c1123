"""What LLVM and the host know about CPUs: name/feature validation, host facts, ISA tables.

LLVM does not fail on an unknown ``-mcpu`` or ``-mattr`` entry when a target machine is created:
it prints "is not a recognized processor/feature" and goes on, and the process then dies with a
fatal error at code generation (or at once, for a feature without ``+``/``-``). So names are
checked here, when a Target is parsed: the target machine is created in-process with LLVM's
stderr captured, and the warning, if any, becomes a :class:`~templtune.errors.TargetError`.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

from templtune.errors import TargetError

__all__ = ["HostCpu", "check_cpu_and_features", "cpu_isa", "fma_bits", "host_cpu"]

_LOCK = threading.Lock()
_FEATURE = re.compile(r"[+-][A-Za-z0-9][A-Za-z0-9._-]*")


@lru_cache(maxsize=1)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@dataclass(frozen=True, slots=True)
class HostCpu:
    """The host as LLVM sees it."""

    triple: str
    name: str
    #: LLVM's feature string (``+avx2,-avx512f,...``)
    features: str
    #: the names of the enabled features
    enabled: frozenset[str]
    cores: int


@lru_cache(maxsize=1)
def host_cpu() -> HostCpu:
    """The host CPU (name, features, usable cores), computed once."""
    _init()
    feats = llvm.get_host_cpu_features()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return HostCpu(llvm.get_process_triple(), llvm.get_host_cpu_name(), feats.flatten(),
                   frozenset(k for k, v in feats.items() if v), cores)


def _llvm_warnings(triple: str, cpu: str, features: str) -> str:
    """What LLVM prints while creating a target machine for ``cpu``/``features``."""
    _init()
    tgt = llvm.Target.from_triple(triple)
    with _LOCK, tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            tgt.create_target_machine(cpu=cpu, features=features, opt=0)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    # NOTE: fd 2 is process-wide: hand back whatever another thread wrote in the window.
    other = [ln for ln in text.splitlines() if "is not a recognized" not in ln]
    if other:
        sys.stderr.write("\n".join(other) + "\n")
    return text


@lru_cache(maxsize=256)
def check_cpu_and_features(triple: str, cpu: str, features: str) -> None:
    """Raise a TargetError naming ``cpu`` or the ``-mattr`` entry LLVM does not know.

    Triples LLVM has no backend for here are not checked (building for them fails anyway,
    with its own message).
    """
    for item in filter(None, (f.strip() for f in features.split(","))):
        if not _FEATURE.fullmatch(item):
            raise TargetError(f"-mattr entry {item!r} must be '+feature' or '-feature'")
    try:
        _init()
        llvm.Target.from_triple(triple)
    except RuntimeError:
        return
    text = _llvm_warnings(triple, cpu, features)
    if f"'{cpu}' is not a recognized processor" in text:
        raise TargetError(f"-mcpu={cpu}: LLVM does not know this CPU for {triple} "
                          "(`llc -mcpu=help` lists the names; -mcpu=native is the host)")
    bad = re.findall(r"'([^']*)' is not a recognized feature", text)
    if bad:
        raise TargetError(f"-mattr: LLVM does not know the feature(s) "
                          f"{', '.join(sorted(set(bad)))} for {triple}")
    if triple.startswith("x86_64") and not _emits_64bit(triple, cpu):
        raise TargetError(f"-mcpu={cpu} is a 32-bit CPU: LLVM cannot generate code for it "
                          f"with the 64-bit triple {triple}")


# NOTE: LLVM accepts these names for a 64-bit triple and then aborts the process at code
# generation ("64-bit code requested on a subtarget that doesn't support it").
_NO_64BIT = frozenset({
    "athlon", "athlon-4", "athlon-mp", "athlon-tbird", "athlon-xp", "c3", "c3-2", "geode",
    "i386", "i486", "i586", "i686", "k6", "k6-2", "k6-3", "lakemont", "pentium", "pentium-m",
    "pentium-mmx", "pentium2", "pentium3", "pentium3m", "pentium4", "pentium4m", "pentiumpro",
    "prescott", "winchip-c6", "winchip2", "yonah"})
_SSE_64BIT = frozenset({
    "generic", "x86-64", "x86-64-v2", "nocona", "core2", "penryn", "nehalem", "corei7",
    "westmere", "bonnell", "atom", "silvermont", "slm", "goldmont", "goldmont-plus", "tremont",
    "k8", "opteron", "athlon64", "athlon-fx", "k8-sse3", "opteron-sse3", "athlon64-sse3",
    "amdfam10", "barcelona", "btver1"})
_PROBE_64 = r"""
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
tm = llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu=sys.argv[2], opt=0)
tm.emit_object(llvm.parse_assembly("define i64 @f(i64 %a) {\n  ret i64 %a\n}\n"))
"""


@lru_cache(maxsize=64)
def _emits_64bit(triple: str, cpu: str) -> bool:
    """Whether LLVM can emit 64-bit code for ``cpu``: known names from the tables, others by
    compiling a one-line function in a child process (the failure is a process abort)."""
    if cpu in _NO_64BIT:
        return False
    if cpu in _SSE_64BIT or cpu in _CPU_ISA or cpu == host_cpu().name:
        return True
    import subprocess

    try:
        done = subprocess.run([sys.executable, "-c", _PROBE_64, triple, cpu],
                              capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: let the build report it
    return not (done.returncode < 0 or b"LLVM ERROR" in done.stderr)


# ------------------------------------------------------------------ per-CPU ISA features
# NOTE: llvmlite exposes the feature table of the host only, so the ISA features of a named
# CPU come from this table (LLVM's X86.td names); tests check it against LLVM's code
# generation. CPUs not listed have no AVX.
_AVX = ("avx",)
_AVX2 = (*_AVX, "avx2", "fma")
_ADL = (*_AVX2, "avxvnni")
_SKX = (*_AVX2, "avx512f")
_CLX = (*_SKX, "avx512vnni")
_SPR = (*_CLX, "avxvnni", "amx-tile", "amx-int8", "amx-bf16")
_CPU_ISA: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("sandybridge", "corei7-avx", "ivybridge", "core-avx-i", "btver2",
                     "bdver1"), _AVX),
    **dict.fromkeys(("bdver2", "bdver3"), (*_AVX, "fma")),
    **dict.fromkeys(("haswell", "core-avx2", "broadwell", "skylake", "bdver4", "znver1",
                     "znver2", "znver3", "x86-64-v3"), _AVX2),
    **dict.fromkeys(("alderlake", "raptorlake", "meteorlake", "arrowlake", "arrowlake-s",
                     "lunarlake", "gracemont", "pantherlake", "sierraforest", "grandridge",
                     "clearwaterforest", "wildcatlake"), _ADL),
    **dict.fromkeys(("knl", "knm", "skylake-avx512", "skx", "cannonlake", "x86-64-v4"), _SKX),
    **dict.fromkeys(("cascadelake", "cooperlake", "icelake-client", "icelake-server",
                     "tigerlake", "rocketlake", "znver4"), _CLX),
    "znver5": (*_CLX, "avxvnni"),
    **dict.fromkeys(("sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
                     "diamondrapids"), _SPR),
}
#: CPUs whose AVX-512 FMAs run on 256-bit units, two passes per zmm instruction (LLVM names)
_HALF_WIDTH_512 = frozenset({"znver4"})
#: the ISA features the capability record reports
TRACKED = frozenset(f for fs in _CPU_ISA.values() for f in fs)


# NOTE: LLVM's implications among the tracked features (avx512f implies avx2 and fma, ...).
_IMPLIES: dict[str, tuple[str, ...]] = {
    "avx2": ("avx",), "fma": ("avx",), "avx512f": ("avx2", "fma"), "avx512vnni": ("avx512f",),
    "avxvnni": ("avx2",), "amx-int8": ("amx-tile",), "amx-bf16": ("amx-tile",),
}


def _closure(name: str) -> set[str]:
    # every other avx512* extension implies AVX-512 F
    todo = [name, "avx512f"] if name.startswith("avx512") else [name]
    out: set[str] = set()
    while todo:
        f = todo.pop()
        if f not in out:
            out.add(f)
            todo += _IMPLIES.get(f, ())
    return out


def cpu_isa(cpu: str, features: str = "") -> frozenset[str]:
    """The tracked ISA features (:data:`TRACKED`) of LLVM CPU ``cpu`` with the ``+f``/``-f``
    entries of ``features`` applied; for the host's own name without ``features``, the host's
    features (a VM may hide some that the CPU model has)."""
    host = host_cpu()
    have = set(host.enabled) if cpu == host.name and not features else set(
        _CPU_ISA.get(cpu, ()))
    for item in filter(None, (f.strip() for f in features.split(","))):
        name = item[1:]
        if item[0] == "+":
            have |= _closure(name)
        else:
            have -= {f for f in have if name in _closure(f)}
    return frozenset(have & TRACKED)


def fma_bits(cpu: str, vector_bits: int) -> int:
    """The width of ``cpu``'s FMA units for code with ``vector_bits``-wide vectors: 256 for a
    512-bit vector on a CPU that splits it (:data:`_HALF_WIDTH_512`), else ``vector_bits``."""
    return 256 if vector_bits == 512 and cpu in _HALF_WIDTH_512 else vector_bits
