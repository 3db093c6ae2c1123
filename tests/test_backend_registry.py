"""The backend seam: build() = lower -> render -> compile -> load through registered backends."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from templtune.build_module import build, build_func
from templtune.codegen.cuda import examples as ex
from templtune.codegen.llvm.testing import elementwise
from templtune.codegen.registry import CODEGENS, get_codegen, target_kind_name
from templtune.errors import TargetError
from templtune.runtime.registry import get_loader
from templtune.target import Target


def test_builtin_backends_register_on_first_lookup() -> None:
    assert type(get_codegen("llvm")).__name__ == "LLVMCodegen"
    assert type(get_codegen("cuda")).__name__ == "CudaCodegen"
    assert {"llvm", "cuda"} <= set(CODEGENS)
    assert callable(get_loader("llvm")) and callable(get_loader("cuda"))


def test_unknown_kind_names_the_registered_backends() -> None:
    with pytest.raises(TargetError, match="cannot build for target kind 'opencl'.*cuda, llvm"):
        get_codegen("opencl")
    with pytest.raises(TargetError, match="no runtime loads modules for target kind 'opencl'"):
        get_loader("opencl")


@dataclass(frozen=True)
class _Kind:
    name: str


@dataclass(frozen=True)
class _TargetWithKindRecord:
    kind: _Kind


def test_kind_name_accepts_a_string_or_a_kind_record() -> None:
    assert target_kind_name(Target("llvm")) == "llvm"
    assert target_kind_name(_TargetWithKindRecord(_Kind("cuda"))) == "cuda"


def test_build_func_runs_every_phase_and_the_module_computes() -> None:
    f = elementwise(lambda a: a * 2.0, ["float32"], "float32", 16)
    timings: dict[str, float] = {}
    mod = build_func(f, Target("llvm"), timings=timings)
    assert {"render", "load"} <= set(timings) and len(timings) > 2  # plus compile phases
    a, out = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    mod(a, out)
    np.testing.assert_allclose(out, a * 2)
    assert build(f, target="llvm").get_source("ll") == mod.get_source("ll")


def test_cuda_module_keeps_kernel_ir_in_pickles_only_for_the_emulator(monkeypatch) -> None:
    func = ex.tiled_matmul()[0]
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "pycuda")  # a real GPU runtime asked for
    mod = build(func, target="cuda")
    assert type(mod).__name__ == "CudaModule" and mod.kernels
    assert pickle.loads(pickle.dumps(mod)).kernels == ()
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    assert pickle.loads(pickle.dumps(mod)).kernels
