"""CUDA dense and Winograd templates with register tiles and vectorized shared-memory loads:
sampled configs compute what numpy computes (CPU emulator), use ``float4`` loads where the
rows are aligned, and compile with nvcc."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from templtune import autotvm
from templtune.codegen.cuda.compile import find_nvcc
from templtune.errors import InstantiationError
from templtune.lower.lower_api import lower
from templtune.runtime.cuda import build_cuda
from templtune.runtime.cuda.emulate import emulate
from templtune.target import Target
from templtune.topi.testing import conv2d_nchw_python

importlib.import_module("templtune.templates.cuda.dense")
importlib.import_module("templtune.templates.cuda.conv2d_winograd")

DENSE = (8, 64, 32)
WINOGRAD = (1, 8, 8, 16, 8, 3, 3, (1, 1), 2)


def _configs(task, n, seed, want):
    """The first ``n`` sampled configs (fixed seed) for which ``want(cfg)`` holds, with their
    lowered function and CUDA module (source only)."""
    rng = np.random.default_rng(seed)
    out = []
    for idx in task.config_space.sample_ints(min(len(task.config_space), 400), rng):
        cfg = task.config_space.get(int(idx))
        if not want(cfg):
            continue
        with Target("cuda"):
            s, args = task.instantiate(cfg)
        func = lower(s, args, "default_function")
        try:
            module = build_cuda(func, "cuda", compile=False)
        except InstantiationError as exc:
            pytest.fail(f"a kept config is over the limits: {cfg}: {exc}")
        out.append((cfg, func, module))
        if len(out) == n:
            break
    assert len(out) == n
    return out


def _dense_task():
    return autotvm.task.create("dense.cuda", DENSE, "cuda")


def _aligned(cfg) -> bool:
    # k-slices of whole float4s, register tiles of more than one element
    k = cfg["tile_k"].size
    return (cfg["vec"].val == 4 and cfg["pad"].val == 0 and (k[1] * k[2]) % 4 == 0
            and cfg["tile_y"].size[3] > 1 and cfg["tile_x"].size[1] > 1)


def test_vectorized_register_tiled_dense_matches_numpy():
    rng = np.random.default_rng(0)
    data = rng.random(DENSE[:2], dtype=np.float32)
    weight = rng.random((DENSE[2], DENSE[1]), dtype=np.float32)
    for cfg, func, module in _configs(_dense_task(), 3, 1, _aligned):
        src = module.get_source()
        assert "float4" in src and "data_shared_local" in src, cfg
        out = np.zeros((DENSE[0], DENSE[2]), np.float32)
        emulate(func, data, weight, out)
        np.testing.assert_allclose(out, data @ weight.T, rtol=1e-5, err_msg=str(cfg))


def test_padded_shared_rows_dense_matches_numpy():
    from templtune.templates.cuda.dense import padded_row

    rng = np.random.default_rng(5)
    data = rng.random(DENSE[:2], dtype=np.float32)
    weight = rng.random((DENSE[2], DENSE[1]), dtype=np.float32)
    def want(c):
        return c["pad"].val == 1 and (c["tile_k"].size[1] * c["tile_k"].size[2]) % 8 == 0

    for cfg, func, module in _configs(_dense_task(), 2, 6, want):
        k_in = cfg["tile_k"].size[1] * cfg["tile_k"].size[2]
        rows = cfg["tile_y"].size[1] * cfg["tile_y"].size[2] * cfg["tile_y"].size[3]
        assert padded_row(k_in, 1) == k_in + 1
        halves = 2 if cfg["double_buffer"].val and k_in < DENSE[1] else 1
        assert f"__shared__ float data_shared[{rows * (k_in + 1) * halves}]" in \
            module.get_source()
        out = np.zeros((DENSE[0], DENSE[2]), np.float32)
        emulate(func, data, weight, out)
        np.testing.assert_allclose(out, data @ weight.T, rtol=1e-5, err_msg=str(cfg))


def test_dense_with_any_vector_width_matches_numpy():
    # unaligned k-slices: the vector copies fall back to element copies, still correct
    task = autotvm.task.create("dense.cuda", (3, 10, 6), "cuda")
    rng = np.random.default_rng(1)
    data = rng.random((3, 10), dtype=np.float32)
    weight = rng.random((6, 10), dtype=np.float32)
    for cfg, func, _ in _configs(task, 3, 2, lambda c: c["vec"].val > 1):
        out = np.zeros((3, 6), np.float32)
        emulate(func, data, weight, out)
        np.testing.assert_allclose(out, data @ weight.T, rtol=1e-5, err_msg=str(cfg))


def test_vectorized_winograd_matches_numpy():
    task = autotvm.task.create("conv2d_nchw_winograd.cuda", WINOGRAD, "cuda")
    rng = np.random.default_rng(2)
    data = rng.random((1, 8, 8, 8), dtype=np.float32)
    kernel = rng.random((16, 8, 3, 3), dtype=np.float32)
    ref = conv2d_nchw_python(data, kernel, (1, 1), (1, 1))
    for cfg, func, _ in _configs(task, 2, 3, lambda c: c["vec"].val == 4):
        out = np.zeros(ref.shape, np.float32)
        emulate(func, data, kernel, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@pytest.mark.cuda
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_sampled_dense_and_winograd_kernels_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path))
    winograd = autotvm.task.create("conv2d_nchw_winograd.cuda", WINOGRAD, "cuda")
    dense = _configs(_dense_task(), 2, 4, _aligned)
    for _, func, _ in dense + _configs(winograd, 1, 5, lambda c: c["vec"].val == 4):
        module = build_cuda(func, "cuda")
        assert module.binary[:4] == b"\x7fELF"
