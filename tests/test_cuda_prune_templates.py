"""The CUDA dense and Winograd spaces are pruned to the target's per-block limits; the oracle
is the CUDA backend's own resource check (``precheck``) on the lowered IR of each config."""

from __future__ import annotations

import importlib
import itertools
import re

import numpy as np
import pytest

from templtune import autotvm
from templtune.autotvm.space import ConfigEntity
from templtune.codegen.cuda.build import CudaLimits, limits_from_target, precheck
from templtune.errors import InstantiationError
from templtune.lower.lower_api import lower
from templtune.target import Target

importlib.import_module("templtune.templates.cuda.dense")
importlib.import_module("templtune.templates.cuda.conv2d_winograd")

#: the knobs that change a kernel's resources
TILE_KNOBS = ("tile_y", "tile_x", "tile_k", "pad", "double_buffer", "tile_b", "tile_rc")


def _verdict(task, index: int, lim: CudaLimits) -> str:
    """The backend's verdict on config ``index``: empty when within the limits."""
    space = task.config_space
    cfg = ConfigEntity(index, None, space._entities_at(index), [])
    with Target(str(task.target)):
        s, args = task.instantiate(cfg)
    try:
        precheck(lower(s, args, "default_function"), lim)
    except InstantiationError as exc:
        return str(exc)
    return ""


def _exceeds(msg: str, lim: CudaLimits) -> bool:
    """Whether the backend's message names a usage over one of ``lim``'s numbers."""
    checks = [(r"(\d+) threads per block", lim.max_threads_per_block),
              (r"(\d+) bytes of shared memory", lim.max_shared_memory_per_block),
              (r"(\d+) words per thread", lim.max_local_words_per_thread)]
    for pattern, cap in checks:
        m = re.search(pattern, msg)
        if m and int(m.group(1)) > cap:
            return True
    m = re.search(r"(\d+) registers per thread x (\d+) threads", msg)
    return bool(m) and int(m.group(1)) * int(m.group(2)) > lim.max_registers_per_block


def _tile_combinations(space):
    """One index per combination of the tile knobs' entities (the other knobs, which do not
    change the resources, drawn at random): every resource-distinct config of the space."""
    names = list(space.space_map)
    dims = [len(space.space_map[n]) for n in names]
    tiles = [k for k, n in enumerate(names) if n in TILE_KNOBS]
    rng = np.random.default_rng(0)
    for combo in itertools.product(*(range(dims[k]) for k in tiles)):
        point = [int(rng.integers(d)) for d in dims]
        for k, v in zip(tiles, combo):
            point[k] = v
        yield int(np.ravel_multi_index(point[::-1], dims[::-1]))


def _check_every_config(task) -> None:
    space = task.config_space
    lim = limits_from_target(task.target)
    valid = space._valid_all()
    n_tiles, n_fit = 0, 0
    for index in _tile_combinations(space):
        msg = _verdict(task, index, lim)
        n_tiles += 1
        n_fit += msg == ""
        assert bool(valid[index]) == (msg == ""), (space._entities_at(index), msg)
        if msg:
            assert _exceeds(msg, lim), msg
    # the independent count: the backend's fits times the resource-neutral knob choices
    other = space.range_length // n_tiles
    print(f"{task.name}{task.args}: {len(space)} of {space.range_length} configs fit "
          f"(backend count {n_fit} x {other})")
    assert 0 < n_fit < n_tiles
    assert len(space) == n_fit * other


@pytest.mark.slow
def test_every_dense_config_fits_exactly_when_kept():
    task = autotvm.task.create("dense.cuda", (2, 8, 4),
                               "cuda -max_threads_per_block=4 -max_shared_memory_per_block=96")
    _check_every_config(task)


@pytest.mark.slow
@pytest.mark.parametrize("args, target", [
    ((1, 2, 2, 4, 2, 3, 3, (1, 1), 2), "-max_threads_per_block=16 -max_shared_memory_per_block=256"),
    # F(4x4, 3x3): 6 x 6 pairs, whose runs of 4 and 9 do not tile the rows
    ((1, 4, 4, 1, 1, 3, 3, (1, 1), 4), "-max_threads_per_block=8 -max_shared_memory_per_block=64"),
])
def test_every_winograd_config_fits_exactly_when_kept(args, target):
    task = autotvm.task.create("conv2d_nchw_winograd.cuda", args, f"cuda {target}")
    _check_every_config(task)


@pytest.mark.parametrize("name, args", [
    ("dense.cuda", (16, 64, 32)),
    ("dense.cuda", (1024, 1024, 1024)),
    ("conv2d_nchw_winograd.cuda", (1, 14, 14, 64, 64, 3, 3, (1, 1), 2)),
    ("conv2d_nchw_winograd.cuda", (1, 7, 7, 512, 512, 3, 3, (1, 1), 4)),
])
def test_sampled_configs_of_real_workloads(name, args):
    task = autotvm.task.create(name, args, "cuda")
    space = task.config_space
    print(f"{name}{args}: {len(space)} of {space.range_length} configs fit")
    assert 0 < len(space) < space.range_length
    lim = limits_from_target(task.target)
    rng = np.random.default_rng(4)
    for index in space.sample_ints(4, rng=rng):
        assert _verdict(task, int(index), lim) == "", space.get(int(index))
    dropped = np.flatnonzero(~space._valid_all())
    for index in rng.choice(dropped, 4, replace=False):
        assert _exceeds(_verdict(task, int(index), lim), lim), space._entities_at(int(index))


def test_precheck_counts_each_kernel_on_its_own():
    # the Winograd transforms run 64 threads in threadIdx.x; a GEMM block of 4 x 4 threads in
    # threadIdx.z/y fits on its own, and must not be multiplied by the transforms' 64
    task = autotvm.task.create("conv2d_nchw_winograd.cuda", (1, 6, 6, 8, 4, 3, 3, (1, 1), 2),
                               "cuda")
    space = task.config_space
    want = {"tile_b": [-1, 1, 4, 1], "tile_y": [-1, 1, 4, 1], "tile_x": [-1, 1, 1, 1]}
    index = next(i for i in range(space.range_length)
                 if all(list(space._entities_at(i)[k].size) == v for k, v in want.items()))
    assert space.is_index_valid(index)
    lim = limits_from_target("cuda -max_threads_per_block=64")
    assert _verdict(task, index, lim) == ""
