"""``conv2d_NCHWc`` pointwise convs over fused pixels: register blocks that divide no row match
numpy (strided, chunked, odd inputs; AVX2 and the host), the AVX2 fallback's block, and a network
whose pointwise convs run tail blocks with their fused epilogues."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data
from templtune.target import Target
from templtune.templates.x86.conv2d_nchwc import register_vectors
from templtune.topi import testing as ref


def _tail_configs(args: tuple, target: str) -> list:
    with Target(target):
        space = autotvm.task.create("conv2d_NCHWc", args, target).config_space
        ow = (args[2] - 1) // args[7] + 1
        return [space.get(i) for i in range(space.range_length)
                if space.is_index_valid(i) and ow % space.get(i)["tile_ow"].size[-1]]


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm"])
@pytest.mark.parametrize("args", [(1, 7, 7, 64, 32, 1, 1, 1, 0), (1, 14, 14, 64, 32, 1, 1, 1, 0),
                                  (1, 14, 14, 64, 32, 1, 1, 2, 0),  # strided: reads skip
                                  (1, 7, 7, 32, 1024, 1, 1, 1, 0),  # chunked
                                  (1, 13, 13, 32, 1024, 1, 1, 2, 0)])  # both, odd input
def test_pointwise_tail_blocks_match_numpy(target, args):
    configs = _tail_configs(args, target)
    assert configs, f"no tail block in the {target} space of {args}"
    rng = np.random.default_rng(0)
    n, h, w, co, ci, stride = *args[:5], args[7]
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    task = autotvm.task.create("conv2d_NCHWc", args, target)
    for cfg in [configs[int(i)] for i in rng.choice(len(configs), min(3, len(configs)), False)]:
        with Target(target), autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
        ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
        assert tuple(int(d) for d in tensors[2].shape) == (n, co // oc_bn, oh * ow, oc_bn)
        mod = templtune.build(sch, tensors, target=target)
        x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
        k = rng.standard_normal((co, ci, 1, 1)).astype(np.float32)
        out = np.zeros((n, co // oc_bn, oh, ow, oc_bn), np.float32)
        mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn), out.reshape(-1, oh * ow, oc_bn)[None])
        np.testing.assert_allclose(unpack_data(out), ref.conv2d_nchw_python(x, k, stride, 0),
                                   rtol=1e-3, atol=1e-3, err_msg=str(cfg))


def test_avx2_fallback_blocks_a_7x7_pointwise_conv_as_5_pixels_in_one_pass():
    # 7 pixels x 2 ymm would need two 7 x 1 passes (one broadcast per FMA); of the one-pass
    # blocks, 9 x 5 + 4 pixels leave no latency-bound tail (8 x 6 + 1 and 12 x 4 + 1 do)
    args = (1, 7, 7, 64, 32, 1, 1, 1, 0)
    cfg = FallbackConfigEntity()
    with Target("llvm -mcpu=haswell"), autotvm.ApplyConfig(cfg):
        autotvm.task.create("conv2d_NCHWc", args, "llvm -mcpu=haswell").func(*args)
    assert (cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]) == (16, 5)
    assert register_vectors(5, 2, 1, 16) == 2


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm"])
def test_a_network_runs_tail_blocks_with_their_epilogues(target):
    from templtune.graph import nn, reference
    from templtune.graph.build import build
    from templtune.graph.executor import GraphModule
    from templtune.graph.ir import Function
    from templtune.graph.transform import PassContext

    # a bottleneck's pointwise convs: a strided one into a residual add, the 7x7 ones after
    data = nn.var("data", (1, 32, 14, 14))
    w1, b1, w2 = nn.var("w1", (64, 32, 1, 1)), nn.var("b1", (64,)), nn.var("w2", (32, 64, 1, 1))
    w3 = nn.var("w3", (32, 32, 1, 1))
    h = nn.relu(nn.bias_add(nn.conv2d(data, w1, strides=(2, 2)), b1))
    f = Function((data, w1, b1, w2, w3),
                 nn.relu(nn.add(nn.conv2d(h, w2), nn.conv2d(data, w3, strides=(2, 2)))),
                 name="pointwise")
    rng = np.random.default_rng(1)
    params = {"w1": rng.standard_normal((64, 32, 1, 1)).astype(np.float32),
              "b1": rng.standard_normal(64).astype(np.float32),
              "w2": rng.standard_normal((32, 64, 1, 1)).astype(np.float32),
              "w3": rng.standard_normal((32, 32, 1, 1)).astype(np.float32)}
    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    with PassContext(opt_level=3):
        lib = build(f, target, params)
    m = GraphModule(lib["default"]())
    m.run(data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.evaluate(f, params, data=x),
                               rtol=1e-4, atol=1e-4)
    groups = [(g.impl, [c.op for c in g.group.calls]) for g in lib.groups]
    assert sum(impl == "autotvm:conv2d_NCHWc" for impl, _ in groups) == 3
    # bias, residual add and relu run inside the convs' kernels
    assert all(impl == "autotvm:conv2d_NCHWc" for impl, ops in groups
               if "add" in ops or "nn.relu" in ops), groups


# explicit targets: the blocks a space holds follow the ISA's registers (AVX2's 16 ymm allow
# at most 14 pixels of 8 channels), and the test must not depend on the host's
@pytest.mark.parametrize("target,ow_bn", [("llvm -mcpu=skylake-avx512", 15),
                                          ("llvm -mcpu=skylake-avx512", 16),
                                          ("llvm -mcpu=skylake-avx512", 24),
                                          ("llvm -mcpu=haswell", 8), ("llvm -mcpu=haswell", 13)])
def test_a_pixel_block_accumulates_only_its_pixels(target, ow_bn):
    # the output stage reads the 5-D conv as a view, (p // 7) * 7 + p % 7: unsimplified after
    # the split of p, bound inference gave each block of ow_bn pixels the accumulators of
    # every row it touches (all 49 here: 2-4x the work, spilled)
    from templtune.lower.ir import Allocate
    from templtune.te.functor import post_order

    args = (1, 7, 7, 64, 64, 1, 1, 1, 0)
    task = autotvm.task.create("conv2d_NCHWc", args, target)
    cfg = next(c for c in _tail_configs(args, target)
               if c["tile_oc"].size[-1] == 8 and c["tile_ow"].size[-1] == ow_bn)
    with Target(target), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    body = templtune.lower(sch, tensors).body
    sizes = {int(np.prod([int(d) for d in n.buffer.shape])) for n in post_order(body)
             if isinstance(n, Allocate) and "pixels" in n.buffer.name}
    assert sizes == {ow_bn * 8}


def test_a_7_pixel_row_of_one_vector_runs_wider_blocks_over_the_fused_pixels():
    # 7 accumulators leave the FMA chains latency-bound: 28 pixels (4 rows, the last block
    # peeled) fill the AVX-512 accumulators; AVX2's 12 are already half full with 7
    args = (1, 7, 7, 440, 440, 1, 1, 1, 0)
    for target, want in (("llvm -mcpu=skylake-avx512", 28), ("llvm -mcpu=haswell", 7)):
        cfg = FallbackConfigEntity()
        with Target(target), autotvm.ApplyConfig(cfg):
            autotvm.task.create("conv2d_NCHWc", args, target).func(*args)
        assert (cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]) == (8, want)


def test_few_blocks_run_in_pixel_bands_on_several_threads():
    """One block of 16 channels over 15x15 fused pixels (12-pixel register blocks) runs in 9
    equal bands of 25 pixels on 2 cores (each peeling its own 1-pixel tail), in one piece on
    1 core; both match numpy."""
    import re

    from templtune.autotvm.space import ConfigEntity
    from templtune.templates.x86.conv2d_nchwc import pixel_bands

    assert pixel_bands(225, 12, 1, 2) == 9 and pixel_bands(225, 12, 1, 1) == 1
    assert pixel_bands(3025, 28, 1, 2) == 11 and pixel_bands(49, 28, 5, 2) == 1
    assert pixel_bands(196, 16, 3, 2) == 2
    assert pixel_bands(9, 16, 1, 2) == 1  # a (hand-written) block wider than the map
    args = (1, 15, 15, 16, 64, 1, 1, 1, 0)
    cfg = ConfigEntity.from_json_dict({"index": 0, "entity": [
        ["tile_ic", "sp", [-1, 16]], ["tile_oc", "sp", [-1, 16]], ["tile_ow", "sp", [-1, 12]],
        ["unroll_kw", "ot", False]]})
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 64, 15, 15)).astype(np.float32)
    k = rng.standard_normal((16, 64, 1, 1)).astype(np.float32)
    for cores, loops in ((2, ["9"]), (1, [])):  # one block, one band: a serial loop
        with Target(f"llvm -num-cores={cores}"), autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
        ir = str(templtune.lower(sch, tensors, simple_mode=True))
        par = re.findall(r"for \(\S+: int32, 0, (\d+)\) \"parallel\"", ir)
        assert par == loops
        out = np.full((1, 1, 225, 16), np.nan, np.float32)
        templtune.build(sch, tensors, target="llvm")(pack_data(x, 16), pack_kernel(k, 16, 16),
                                                     out)
        np.testing.assert_allclose(unpack_data(out.reshape(1, 1, 15, 15, 16)),
                                   ref.conv2d_nchw_python(x, k, 1, 0), rtol=1e-3, atol=1e-3)
