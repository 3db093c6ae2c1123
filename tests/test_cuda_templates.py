"""CUDA templates: sampled configurations build, compile with nvcc and compute what numpy
computes (checked on the CPU emulator)."""

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

importlib.import_module("templtune.templates.cuda.conv2d_nchw")

SMALL = (1, 6, 6, 8, 4, 3, 3, (1, 1), (1, 1))


def _valid_configs(task, n, seed):
    """The first ``n`` sampled configurations that fit the GPU (fixed seed)."""
    rng = np.random.default_rng(seed)
    out = []
    for idx in task.config_space.sample_ints(min(len(task.config_space), 40), rng):
        cfg = task.config_space.get(int(idx))
        with Target("cuda"):
            s, args = task.instantiate(cfg)
        func = lower(s, args, "default_function")
        try:
            module = build_cuda(func, "cuda", compile=False)
        except InstantiationError:
            continue
        out.append((cfg, func, module))
        if len(out) == n:
            break
    return out


def test_seed_space_matches_the_tutorial():
    task = autotvm.task.create("tutorial/conv2d_no_batching",
                               (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)), "cuda")
    space = task.config_space
    # the tutorial's index space; configs over the target's limits are filtered out of it
    assert space.range_length == 10_454_400 and len(space) < space.range_length
    assert [k for k in space.space_map] == ["tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry",
                                            "tile_rx", "auto_unroll_max_step", "unroll_explicit"]


@pytest.fixture(scope="module")
def small_configs():
    task = autotvm.task.create("tutorial/conv2d_no_batching", SMALL, "cuda")
    return _valid_configs(task, 4, seed=7)


def test_sampled_conv2d_configs_match_numpy(small_configs):
    assert len(small_configs) == 4
    rng = np.random.default_rng(0)
    data = rng.random((1, 4, 6, 6), dtype=np.float32)
    kernel = rng.random((8, 4, 3, 3), dtype=np.float32)
    ref = conv2d_nchw_python(data, kernel, (1, 1), (1, 1))
    for cfg, func, module in small_configs:
        out = np.zeros(ref.shape, np.float32)
        emulate(func, data, kernel, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, err_msg=str(cfg))
        src = module.get_source()
        assert "__shared__ float pad_temp_shared" in src and "__syncthreads();" in src


def test_strided_conv2d_matches_numpy():
    args = (1, 9, 9, 4, 2, 3, 3, (2, 2), (1, 1))
    task = autotvm.task.create("conv2d_nchw.cuda", args, "cuda")
    (cfg, func, _), = _valid_configs(task, 1, seed=3)
    rng = np.random.default_rng(1)
    data = rng.random((1, 2, 9, 9), dtype=np.float32)
    kernel = rng.random((4, 2, 3, 3), dtype=np.float32)
    ref = conv2d_nchw_python(data, kernel, (2, 2), (1, 1))
    out = np.zeros(ref.shape, np.float32)
    emulate(func, data, kernel, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, err_msg=str(cfg))


def test_over_limit_configs_are_instantiation_errors():
    task = autotvm.task.create("tutorial/conv2d_no_batching", SMALL, "cuda")
    space = task.config_space
    # config 0 keeps one element of each shared tile (8 bytes); force a smaller limit
    cfg = space.get(0)
    with Target("cuda"):
        s, args = task.instantiate(cfg)
    func = lower(s, args, "default_function")
    with pytest.raises(InstantiationError):
        build_cuda(func, "cuda -max_shared_memory_per_block=4", compile=False)


@pytest.mark.cuda
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_sampled_conv2d_configs_compile(small_configs, tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path))
    for _, func, _ in small_configs[:2]:
        module = build_cuda(func, "cuda")
        assert module.binary[:4] == b"\x7fELF"


def test_sampled_dense_configs_match_numpy():
    importlib.import_module("templtune.templates.cuda.dense")
    task = autotvm.task.create("dense.cuda", (4, 24, 16), "cuda")
    configs = _valid_configs(task, 3, seed=11)
    assert len(configs) == 3
    rng = np.random.default_rng(2)
    data = rng.random((4, 24), dtype=np.float32)
    weight = rng.random((16, 24), dtype=np.float32)
    for cfg, func, module in configs:
        out = np.zeros((4, 16), np.float32)
        emulate(func, data, weight, out)
        np.testing.assert_allclose(out, data @ weight.T, rtol=1e-5, err_msg=str(cfg))
        assert "__shared__ float data_shared" in module.get_source()


def test_sampled_winograd_configs_match_numpy():
    importlib.import_module("templtune.templates.cuda.conv2d_winograd")
    task = autotvm.task.create("conv2d_nchw_winograd.cuda", (1, 6, 6, 8, 4, 3, 3, (1, 1)),
                               "cuda")
    configs = _valid_configs(task, 2, seed=5)
    assert len(configs) == 2
    rng = np.random.default_rng(3)
    data = rng.random((1, 4, 6, 6), dtype=np.float32)
    kernel = rng.random((8, 4, 3, 3), dtype=np.float32)
    ref = conv2d_nchw_python(data, kernel, (1, 1), (1, 1))
    for cfg, func, module in configs:
        assert len(module.launches) == 5 and len(module.workspace) == 4
        out = np.zeros(ref.shape, np.float32)
        emulate(func, data, kernel, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_tuning_end_to_end_on_the_emulator(tmp_path, monkeypatch):
    """Builder processes (nvcc) -> pickled modules -> runner process -> CPU emulator backend ->
    correctness check -> log -> apply_history_best -> build: the GPU tuning flow without a GPU."""
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path / "cache"))
    from templtune.autotvm.tuner import RandomTuner

    mod = importlib.import_module("templtune.templates.cuda.conv2d_nchw")
    task = autotvm.task.create("tutorial/conv2d_no_batching", SMALL, "cuda")
    mo = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=120),
        runner=autotvm.LocalRunner(number=1, repeat=1, timeout=120))
    log = str(tmp_path / "conv2d.log")
    results = []
    RandomTuner(task).tune(n_trial=3, measure_option=mo,
                           callbacks=[lambda _t, _i, rs: results.extend(rs),
                                      autotvm.callback.log_to_file(log)])
    assert any(int(r.error_no) == 0 for r in results), results
    import templtune

    with autotvm.apply_history_best(log), Target("cuda"):
        s, args = mod.conv2d_no_batching(*SMALL)
        module = templtune.build(s, args, "cuda")
    rng = np.random.default_rng(0)
    data = rng.random((1, 4, 6, 6), dtype=np.float32)
    kernel = rng.random((8, 4, 3, 3), dtype=np.float32)
    out = np.zeros((1, 8, 6, 6), np.float32)
    module(data, kernel, out)
    np.testing.assert_allclose(out, conv2d_nchw_python(data, kernel, (1, 1), (1, 1)), rtol=1e-4)
