"""CUDA runtime seam: backend selection, time-evaluator semantics, launcher (through the CPU
emulator backend here; through the real GPU when one is present)."""

from __future__ import annotations

import numpy as np
import pytest

from templtune.codegen.cuda import examples as ex
from templtune.codegen.cuda.compile import find_nvcc
from templtune.errors import RuntimeCallError
from templtune.runtime.cuda.backend import (
    CudaRuntimeError,
    CudaUnavailableError,
    available,
    get_backend,
)
from templtune.runtime.cuda.launcher import DeviceArray, time_evaluator
from templtune.runtime.cuda.module import build_cuda
from templtune.runtime.cuda.timing import TimeResult, measure_loop


def _gpu() -> bool:
    return available("pycuda") or available("cuda-python")


def test_measure_loop_grows_number_and_carries_it_over():
    calls = []

    def batch(n):
        calls.append(n)
        return n * 1e-4  # 0.1 ms per call

    res = measure_loop(batch, number=2, repeat=3, min_repeat_ms=5)
    assert calls[0] == 1  # untimed warm-up
    assert calls[1] == 2
    assert calls[2] == int(max(5 / 0.1 + 1, 2 * 1.618))  # 51
    assert calls[3:] == [51, 51]  # the grown number carries over
    assert len(res.results) == 3 and all(abs(r - 1e-4) < 1e-12 for r in res.results)
    assert isinstance(res, TimeResult) and abs(res.mean - 1e-4) < 1e-12


def test_measure_loop_without_min_repeat_and_zero_durations():
    res = measure_loop(lambda n: 0.0, number=3, repeat=2, min_repeat_ms=0)
    assert res.results == (0.0, 0.0)
    seen = []
    measure_loop(lambda n: seen.append(n) or 0.0, number=1, repeat=1, min_repeat_ms=1)
    assert len(seen) == 1 + 100  # warm-up, then at most 100 zero-duration tries
    with pytest.raises(ValueError):
        measure_loop(lambda n: 0.0, number=0)


def test_unknown_backend_and_unavailable_errors(monkeypatch):
    monkeypatch.delenv("TEMPLTUNE_CUDA_BACKEND", raising=False)
    with pytest.raises(CudaUnavailableError, match="unknown CUDA backend"):
        get_backend("opencl")
    assert issubclass(CudaUnavailableError, CudaRuntimeError)
    assert issubclass(CudaRuntimeError, RuntimeError)
    if not _gpu():
        # no GPU: a real runtime asked for by name is an error naming the emulator setting,
        # no name at all falls back to the emulator
        with pytest.raises(CudaUnavailableError, match="TEMPLTUNE_CUDA_BACKEND.*emulator"):
            get_backend("pycuda")
        assert get_backend().name == "emulator"


@pytest.fixture
def emulator(monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    return get_backend()


def test_module_call_through_emulator_backend(emulator):
    func, make, ref = ex.tiled_matmul(vt=2)
    m = build_cuda(func, compile=False)
    args = make(np.random.default_rng(0))
    m(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5)
    res = m.time_evaluator(m.entry_name, None, number=2, repeat=3)(*args)
    assert len(res.results) == 3 and res.mean > 0


def test_emulator_backend_llvm_mode(monkeypatch):
    from templtune.runtime.cuda.emulated import EmulatorBackend

    monkeypatch.setenv("TEMPLTUNE_CUDA_EMULATOR", "llvm")
    be = EmulatorBackend()
    func, make, ref = ex.tiled_matmul(vt=2, unroll=16, explicit=1)
    m = build_cuda(func, compile=False)
    args = make(np.random.default_rng(3))
    from templtune.runtime.cuda.launcher import run

    run(m, args, backend=be)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5)


def test_emulator_device_attributes(emulator):
    from templtune.codegen.cuda.build import CudaLimits
    from templtune.runtime.cuda.backend import device_attributes

    attrs = device_attributes("emulator")
    assert attrs["arch"] == CudaLimits().arch
    assert attrs["max_shared_memory_per_block"] == CudaLimits().max_shared_memory_per_block


def test_device_arrays_and_argument_checks(emulator):
    func, make, ref = ex.vector_add(n=100, threads=32)
    m = build_cuda(func, compile=False)
    a, b, c = make(np.random.default_rng(1))
    da, db, dc = (DeviceArray.from_numpy(x, emulator) for x in (a, b, c))
    m(da, db, dc)
    np.testing.assert_allclose(dc.numpy(), a + b)
    assert c.sum() == 0  # device arrays are not copied back into host arrays
    with pytest.raises(RuntimeCallError, match="expects 3 arguments"):
        m(a, b)
    with pytest.raises(RuntimeCallError, match="dtype"):
        m(a.astype(np.float64), b, c)
    res = time_evaluator(m, number=1, repeat=1, backend=emulator)(da, db, dc)
    assert len(res.results) == 1


@pytest.mark.cuda
@pytest.mark.skipif(find_nvcc() is None or not _gpu(), reason="needs nvcc and a GPU")
@pytest.mark.parametrize("make", [lambda: ex.vector_add(n=100_000, threads=256),
                                  lambda: ex.tiled_matmul(m=256, n=256, k=256, tile=16, vt=2,
                                                          unroll=64, explicit=1),
                                  lambda: ex.vector_copy_exp(n=1 << 16, threads=128)])
def test_gpu_run_matches_numpy(make, monkeypatch):
    monkeypatch.delenv("TEMPLTUNE_CUDA_BACKEND", raising=False)
    func, mk, ref = make()
    m = build_cuda(func)
    args = mk(np.random.default_rng(2))
    m(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-4, atol=1e-4)
    res = m.time_evaluator(m.entry_name, None, number=5, repeat=2, min_repeat_ms=5)(*args)
    assert len(res.results) == 2 and all(r > 0 for r in res.results)
    from templtune.runtime.cuda.backend import device_attributes

    attrs = device_attributes()
    assert attrs["arch"].startswith("sm_") and attrs["max_threads_per_block"] >= 1024


@pytest.mark.cuda
@pytest.mark.skipif(find_nvcc() is None or not _gpu(), reason="needs nvcc and a GPU")
def test_gpu_seed_conv2d_configs_match_numpy(monkeypatch):
    import importlib

    from templtune import autotvm
    from templtune.lower.lower_api import lower
    from templtune.target import Target
    from templtune.topi.testing import conv2d_nchw_python

    monkeypatch.delenv("TEMPLTUNE_CUDA_BACKEND", raising=False)
    importlib.import_module("templtune.templates.cuda.conv2d_nchw")
    task = autotvm.task.create("tutorial/conv2d_no_batching",
                               (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)), "cuda")
    rng = np.random.default_rng(0)
    data = rng.random((1, 512, 7, 7), dtype=np.float32)
    kernel = rng.random((512, 512, 3, 3), dtype=np.float32)
    ref = conv2d_nchw_python(data, kernel, (1, 1), (1, 1))
    for index in (786590, 428353):
        with Target("cuda"):
            s, args = task.instantiate(task.config_space.get(index))
        m = build_cuda(lower(s, args, "default_function"), "cuda")
        out = np.zeros(ref.shape, np.float32)
        m(data, kernel, out)
        np.testing.assert_allclose(out, ref, rtol=1e-3)
