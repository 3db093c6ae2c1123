"""The capability record of a target: what code for it may use, computed once per target.

Everything that depends on the machine (is it a GPU, the vector ISA, register budgets, cores,
CUDA resource limits, the CPU and feature string handed to LLVM) reads this record; no other
module inspects target strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from templtune.target.llvm_cpu import cpu_isa, fma_bits, host_cpu

__all__ = ["Capabilities", "compute"]

_DTYPE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8,
               "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64,
               "uint64": 64, "bool": 8}


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a target's machine offers.

    Attributes
    ----------
    kind : str
        The target kind name (``"llvm"``, ``"cuda"``).
    keys : tuple of str
        The dispatch keys (``("cpu",)``, ``("cuda", "gpu")``).
    is_gpu : bool
        Kernels run on a device with its own memory (thread binding required).
    triple, cpu, llvm_features : str
        What LLVM compiles CPU code for (for a GPU target: its host's). ``cpu`` is resolved:
        the host's name when the target has no ``-mcpu`` or ``-mcpu=native``.
    features : frozenset of str
        ISA features by LLVM name among ``avx``, ``avx2``, ``fma``, ``avx512f``,
        ``avx512vnni``, ``avxvnni``, ``amx-tile``, ``amx-int8``, ``amx-bf16``.
    vector_bits : int
        Width of a vector register (512 with AVX-512, 256 with AVX, else 128).
    vector_registers : int
        Architectural vector registers (32 zmm with AVX-512, else 16).
    fma_bits : int
        Width of the FMA units: ``vector_bits``, except on CPUs that run each 512-bit FMA as
        two 256-bit halves (AMD Zen 4), where it is 256: the same code, but other blockings
        and algorithms are fastest there (the reference logs are chosen by it).
    cores : int
        ``-num-cores``, else the cores this process may run on.
    arch : str or None
        CUDA ``sm_XX`` (``-arch``), None when unset or not CUDA.
    max_threads_per_block, max_shared_memory_per_block, max_registers_per_block, warp_size : int
        CUDA resource limits (0 for CPU targets).
    """

    kind: str
    keys: tuple[str, ...]
    is_gpu: bool
    triple: str
    cpu: str
    llvm_features: str
    features: frozenset[str]
    vector_bits: int
    vector_registers: int
    cores: int
    fma_bits: int
    arch: str | None = None
    max_threads_per_block: int = 0
    max_shared_memory_per_block: int = 0
    max_registers_per_block: int = 0
    warp_size: int = 0

    @property
    def has_avx2(self) -> bool:
        return "avx2" in self.features

    @property
    def has_avx512(self) -> bool:
        """AVX-512 F (the 512-bit registers)."""
        return "avx512f" in self.features

    @property
    def has_fma(self) -> bool:
        return "fma" in self.features

    @property
    def has_vnni(self) -> bool:
        """An int8 dot-product instruction: AVX-512 VNNI or AVX-VNNI."""
        return bool({"avx512vnni", "avxvnni"} & self.features)

    @property
    def has_amx(self) -> bool:
        return "amx-tile" in self.features

    @property
    def vector_bytes(self) -> int:
        return self.vector_bits // 8

    def lanes(self, dtype: str = "float32") -> int:
        """Elements of ``dtype`` in one vector register."""
        bits = _DTYPE_BITS.get(str(dtype))
        if bits is None:
            raise ValueError(f"no vector lanes for dtype {dtype!r}")
        return max(1, self.vector_bits // bits)

    def accumulators(self, operand_registers: int | None = None) -> int:
        """Vector registers left for a register tile's accumulators.

        Parameters
        ----------
        operand_registers : int, optional
            Registers kept for the broadcast operand and the weight vectors; default an eighth
            of the register file (2 ymm with AVX2, 4 zmm with AVX-512), which is the budget the
            search spaces admit.
        """
        reserved = self.vector_registers // 8 if operand_registers is None else operand_registers
        return max(1, self.vector_registers - reserved)

    @property
    def accumulator_registers(self) -> int:
        """:meth:`accumulators` with the default reserve (14 with AVX2, 28 with AVX-512)."""
        return self.accumulators()


def compute(kind: str, keys: tuple[str, ...], attrs: dict[str, Any],
            host_attrs: dict[str, Any] | None) -> Capabilities:
    """The record of a parsed target (``host_attrs``: the attrs of a GPU target's host)."""
    from templtune.target import _CUDA_DEFAULTS as CUDA_DEFAULTS

    is_gpu = "gpu" in keys
    cpu_attrs = attrs if not is_gpu else (host_attrs or {})
    host = host_cpu()
    triple = cpu_attrs.get("mtriple") or host.triple
    cpu = cpu_attrs.get("mcpu")
    mattr = cpu_attrs.get("mattr") or ""
    if cpu and cpu != "native":
        feature_str = mattr
    elif triple == host.triple:
        cpu = host.name
        feature_str = ",".join(x for x in (host.features, mattr) if x)
    else:
        cpu, feature_str = "generic", mattr
    isa = cpu_isa(cpu, feature_str)
    bits = 512 if "avx512f" in isa else 256 if "avx" in isa else 128
    cores = int(cpu_attrs.get("num-cores") or 0) or host.cores
    common = dict(kind=str(kind), keys=tuple(keys), is_gpu=is_gpu, triple=triple, cpu=cpu,
                  llvm_features=feature_str, features=isa, vector_bits=bits,
                  vector_registers=32 if bits == 512 else 16, cores=cores,
                  fma_bits=fma_bits(cpu, bits))
    if not is_gpu:
        return Capabilities(**common)  # type: ignore[arg-type]
    arch = attrs.get("arch")
    if arch and not str(arch).startswith("sm_"):
        arch = "sm_" + str(arch).replace(".", "")  # "-arch=8.0" / "-arch=80"

    def limit(name: str) -> int:
        # NOTE: -1 (TVM's "unknown") and absent both mean the CUDA target default
        v = int(attrs.get(name, -1))
        return v if v > 0 else int(CUDA_DEFAULTS[name])

    return Capabilities(
        **common,  # type: ignore[arg-type]
        arch=arch, max_threads_per_block=limit("max_threads_per_block"),
        max_shared_memory_per_block=limit("max_shared_memory_per_block"),
        max_registers_per_block=limit("max_registers_per_block"),
        warp_size=limit("thread_warp_size"))
