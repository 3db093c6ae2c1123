""":class:`CudaModule`: a built CUDA function, runnable through a GPU runtime or the emulator.

The module is plain picklable data (source, binary, launch shapes), so a builder process can
hand it to a measurement process; the GPU runtime is imported only when the module is run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from templtune.codegen.cuda.build import CudaArtifact, CudaCodegen, LaunchSpec, ParamInfo
from templtune.codegen.cuda.compile import compile_cuda
from templtune.codegen.cuda.kernel import Kernel
from templtune.lower.ir import PrimFunc
from templtune.runtime.cuda.backend import emulator_selected
from templtune.runtime.registry import register_loader


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

    @classmethod
    def from_artifact(cls, art: CudaArtifact) -> CudaModule:
        """The module for a :class:`~templtune.codegen.cuda.build.CudaArtifact`."""
        return cls(art.entry_name, art.source, art.launches, art.params, art.workspace,
                   art.binary, art.arch, art.kernels)

    # NOTE: pickles (builder -> runner process) carry source, binary and launch shapes; the
    # kernel IR (only needed to emulate) stays behind unless ``keep_ir`` is set or the
    # emulator backend is selected, and loaded driver handles never travel.
    keep_ir = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_loaded", None)
        keep = state.get("keep_ir", False) or emulator_selected()
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
        """Run the kernels on the CPU (see :mod:`templtune.runtime.cuda.emulate`)."""
        from templtune.runtime.cuda.emulate import run_module

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
    cg = CudaCodegen()
    return CudaModule.from_artifact(cg.assemble(cg.render(func, target), compile, fmt))


@register_loader("cuda")
def load_cuda(artifact: CudaArtifact) -> CudaModule:
    """Wrap a CUDA artifact for running (the GPU runtime loads it on the first call)."""
    return CudaModule.from_artifact(artifact)
