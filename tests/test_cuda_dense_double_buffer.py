"""The ``double_buffer`` knob of the CUDA dense template (TVM's ``dense_large_batch.gpu``
double-buffers both shared tiles): sampled configs compute numpy's result on the lockstep
(race-checking) and LLVM emulations, use twice the shared memory and one barrier per k-step
where the plain config has two, and compile with nvcc."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from templtune import autotvm
from templtune.codegen.cuda.compile import find_nvcc
from templtune.lower.lower_api import lower
from templtune.runtime.cuda import build_cuda
from templtune.runtime.cuda.emulate import emulate
from templtune.runtime.cuda.host_emulate import emulate_llvm
from templtune.target import Target

importlib.import_module("templtune.templates.cuda.dense")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path_factory.getbasetemp() / "cuda"))


def _build(task, index):
    cfg = task.config_space.get(index)
    with Target("cuda"):
        s, args = task.instantiate(cfg)
    func = lower(s, args, "default_function")
    return cfg, func, build_cuda(func, "cuda", compile=False)


def _double_buffered(task, in_dim, n, seed):
    """``n`` sampled indices with double_buffer=1 and more than one outer k-step, each with
    the index of the same config without double buffering."""
    space = task.config_space
    names = list(space.space_map)
    stride = math.prod(len(space.space_map[k]) for k in names[:names.index("double_buffer")])
    out = []
    for idx in space.sample_ints(min(len(space), 400), np.random.default_rng(seed)):
        cfg = space.get(int(idx))
        k = cfg["tile_k"].size
        if cfg["double_buffer"].val == 1 and k[1] * k[2] < in_dim:
            plain = int(idx) - stride
            assert space.get(plain)["double_buffer"].val == 0
            out.append((int(idx), plain))
            if len(out) == n:
                break
    assert len(out) == n
    return out


def _loop_block(src, var="k_outer"):
    """The text of the loop over ``var`` (to its matching brace)."""
    start = src.index(f"for (int {var} ")
    depth, i = 0, src.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[start:i]
        i += 1


def _shared_words(src):
    import re

    return {m[0]: int(m[1]) for m in re.findall(r"__shared__ float (\w+)\[(\d+)\];", src)}


@pytest.mark.parametrize("shape, seed", [((8, 64, 32), 1), ((3, 10, 6), 2)])
def test_double_buffered_dense_configs_match_numpy(shape, seed):
    batch, in_dim, out_dim = shape
    task = autotvm.task.create("dense.cuda", shape, "cuda")
    rng = np.random.default_rng(seed)
    data = rng.random((batch, in_dim), dtype=np.float32)
    weight = rng.random((out_dim, in_dim), dtype=np.float32)
    for idx, plain in _double_buffered(task, in_dim, 3, seed):
        cfg, func, module = _build(task, idx)
        _, _, plain_module = _build(task, plain)
        src, ref = module.get_source(), plain_module.get_source()
        assert {k: 2 * v for k, v in _shared_words(ref).items()} == _shared_words(src), cfg
        assert _loop_block(src).count("__syncthreads();") == 1, cfg
        assert _loop_block(ref).count("__syncthreads();") == 2, cfg
        for run in (emulate, emulate_llvm):
            out = np.zeros((batch, out_dim), np.float32)
            run(func, data, weight, out)
            np.testing.assert_allclose(out, data @ weight.T, rtol=1e-5, err_msg=str(cfg))


@pytest.mark.cuda
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_double_buffered_dense_config_compiles_with_nvcc():
    task = autotvm.task.create("dense.cuda", (8, 64, 32), "cuda")
    ((idx, _),) = _double_buffered(task, 64, 1, 3)
    cfg = task.config_space.get(idx)
    with Target("cuda"):
        s, args = task.instantiate(cfg)
    module = build_cuda(lower(s, args, "default_function"), "cuda")
    assert module.binary and module.binary[:4] == b"\x7fELF", cfg
