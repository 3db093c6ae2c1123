"""x86 templates: 20 seeded configs of each (plus the fallback) build, run and match numpy."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import autotvm
from templtune.autotvm import strategy
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.templates.x86._common import target_vector
from templtune.topi import testing as ref

CATALOG = strategy.catalog_entries("x86")
N_CONFIGS = 20


def _inputs(name: str, args: tuple, rng: np.random.Generator):
    """(input arrays, numpy reference output) for template ``name`` with ``args``: the op's
    inputs, with the weight passed through the template's registered weight transform."""
    def rnd(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    if name == "dense":
        m, n, k = args[:3]
        a, w = rnd(m, k), rnd(n, k)
        arrays, out = [a, w], a @ w.T
    else:
        n_, h, w_, co, ci, kh, kw, s, p = args[:9]
        if name == "conv2d_nhwc":
            a, k = rnd(n_, h, w_, ci), rnd(kh, kw, ci, co)
            arrays, out = [a, k], ref.conv2d_nhwc_python(a, k, s, p)
        elif name == "depthwise_conv2d_nchw":
            a, k = rnd(n_, co, h, w_), rnd(co, ci, kh, kw)
            arrays, out = [a, k], ref.depthwise_conv2d_python_nchw(a, k, s, p)
        else:
            a, k = rnd(n_, ci, h, w_), rnd(co, ci, kh, kw)
            arrays, out = [a, k], ref.conv2d_nchw_python(a, k, s, p)
    transform = strategy.weight_transform(name, args)
    if transform is not None:
        arrays[1] = transform(arrays[1])
    return arrays, out


# (template, args, configs sampled): the first workload of each template samples N_CONFIGS,
# the others (strides, tails, batch 1, pre-transformed kernels) a few more.
WORKLOADS = [
    ("conv2d_nchw", (1, 7, 7, 32, 16, 3, 3, 1, 1), N_CONFIGS),
    ("conv2d_nchw", (1, 15, 18, 16, 3, 3, 3, 2, 1), 4),  # > 1 config with AVX2 too
    ("conv2d_nchw", (1, 7, 7, 32, 16, 3, 3, 1, 1, 16), 4),
    ("conv2d_nchw_wvec", (1, 20, 34, 16, 3, 7, 7, 2, 3), N_CONFIGS),
    ("conv2d_nchw_wvec", (1, 9, 10, 6, 2, 3, 3, 1, 1), 6),
    ("conv2d_nchw_wvec", (2, 11, 13, 4, 3, 5, 3, (2, 1), (1, 2, 0, 1)), 6),
    ("conv2d_nhwc", (1, 8, 8, 32, 8, 3, 3, 1, 1), N_CONFIGS),
    ("conv2d_nhwc", (2, 7, 9, 16, 3, 3, 3, 2, 1), 4),
    ("depthwise_conv2d_nchw", (1, 12, 12, 8, 1, 3, 3, 1, 1), N_CONFIGS),
    ("depthwise_conv2d_nchw", (1, 11, 11, 4, 2, 3, 3, 2, 0), 4),
    ("dense", (4, 48, 24), N_CONFIGS),
    ("dense", (1, 40, 32), 4),
    ("dense", (1, 20, 48), N_CONFIGS),
    ("dense", (3, 32, 16, 8), 4),
    ("conv2d_winograd", (1, 7, 7, 32, 16, 3, 3, 1, 1), N_CONFIGS),
    ("conv2d_winograd", (1, 6, 6, 16, 8, 3, 3, 1, 1, 4), 4),
    ("conv2d_winograd", (1, 7, 7, 16, 8, 3, 3, 1, 1, 2, 8), 4),
    ("conv2d_winograd", (1, 9, 9, 24, 8, 3, 3, 1, 1, 4, 8), 2),
]


def _check(task, cfg, arrays, expected) -> None:
    with autotvm.ApplyConfig(cfg):
        s, args = task.func(*task.args)
    mod = templtune.build(s, args, target="llvm")
    out = np.zeros(expected.shape, np.float32)
    mod(*arrays, out)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3, err_msg=str(cfg))


@pytest.mark.parametrize("name,args,count", WORKLOADS,
                         ids=[f"{n}-{','.join(map(str, a))}" for n, a, _ in WORKLOADS])
def test_seeded_configs_match_numpy(name, args, count):
    rng = np.random.default_rng(7)
    task = autotvm.task.create(name, args, "llvm")
    space = task.config_space
    assert len(space) > 1
    arrays, expected = _inputs(name, args, rng)
    idx = space.sample_ints(min(count, len(space)), rng=np.random.default_rng(0))
    for i in [None, *idx]:
        cfg = FallbackConfigEntity() if i is None else space.get(int(i))
        _check(task, cfg, arrays, expected)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_space_has_real_knobs_and_flops(name):
    info = CATALOG[name]
    task = autotvm.task.create(name, info.example, "llvm")
    space = task.config_space
    assert len(space.space_map) >= 3
    assert len(space) >= 8
    assert task.flop > 0
    # multi_filter drops points: the valid count is below the raw product
    assert len(space) <= space.range_length


def test_fallback_is_register_blocked():
    task = autotvm.task.create("conv2d_nchw", (1, 7, 7, 512, 512, 3, 3, 1, 1), "llvm")
    cfg = FallbackConfigEntity()
    with autotvm.ApplyConfig(cfg):
        task.func(*task.args)
    assert cfg["tile_oc"].size[-1] % 8 == 0
    assert cfg["tile_ow"].size[-1] * cfg["tile_oh"].size[-1] > 1


@pytest.mark.parametrize("name,args,msg", [
    ("conv2d_winograd", (1, 7, 7, 8, 8, 3, 3, 2, 1), "stride 1"),
    ("conv2d_winograd", (1, 7, 7, 8, 8, 3, 3, 1, 1, 3), "pre_transformed"),
    ("conv2d_winograd", (1, 7, 7, 8, 8, 3, 3, 1, 1, 0, 8), "kblock"),
    ("conv2d_winograd", (1, 7, 7, 12, 8, 3, 3, 1, 1, 2, 8), "kblock"),
    ("conv2d_nchw", (1, 2, 2, 8, 8, 5, 5, 1, 0), "empty output"),
    ("dense", (0, 8, 8), "M must be a positive"),
    ("dense", (4, 12, 8, 5), "prepacked must be"),
])
def test_bad_workloads_raise_clear_errors(name, args, msg):
    with pytest.raises(Exception, match=msg):
        autotvm.task.create(name, args, "llvm")


def test_catalog_checks_argument_count():
    with pytest.raises(ValueError, match="takes 3-4 arguments"):
        CATALOG["dense"].check_args((1, 2))
    CATALOG["conv2d_winograd"].check_args((1, 7, 7, 8, 8, 3, 3, 1, 1))


@pytest.mark.parametrize("target,want", [
    ("llvm -mcpu=znver4", (16, 28)),
    ("llvm -mcpu=znver3", (8, 14)),
    ("llvm -mcpu=znver4 -mattr=-avx512f", (8, 14)),
    ("llvm -mcpu=haswell -mattr=+avx512f", (16, 28)),
])
def test_target_vector_follows_mcpu_and_mattr(target, want):
    assert target_vector(target) == want


def test_target_vector_defaults_to_the_host():
    import llvmlite.binding as llvm

    has512 = bool(llvm.get_host_cpu_features().get("avx512f", False))
    assert target_vector("llvm") == ((16, 28) if has512 else (8, 14))


@pytest.mark.parametrize("target", ["llvm -mcpu=znver3", "llvm -mcpu=znver4"])
def test_conv_space_register_budget_is_target_aware(target):
    lanes, regs = target_vector(target)
    task = autotvm.task.create("conv2d_nchw", (1, 56, 56, 64, 64, 3, 3, 1, 1), target)
    space = task.config_space
    worst = 0
    for i in range(space.range_length):
        if not space.is_index_valid(i):
            continue
        cfg = space.get(i)
        acc = (cfg["tile_oh"].size[-1] * cfg["tile_ow"].size[-1]
               * -(-cfg["tile_oc"].size[-1] // lanes))
        assert acc <= regs, (target, cfg)
        worst = max(worst, acc)
    assert worst > 12 if lanes == 8 else worst > 14  # the budget is used, not undercut
    # the AVX-512 space admits blocks the AVX2 one drops (16-lane rows count as one register)
    if lanes == 16:
        assert len(space) > len(autotvm.task.create(
            "conv2d_nchw", (1, 56, 56, 64, 64, 3, 3, 1, 1), "llvm -mcpu=znver3").config_space)
