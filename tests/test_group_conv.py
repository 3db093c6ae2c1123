"""Grouped convolutions (ResNeXt, RegNet): one op from import to kernel.

The oracle is numpy: each group convolved on its own (``conv2d_nchw_python`` on the group's
slice) and the results stacked. Checked: the network op and its default schedule, the x86
``group_conv2d_NCHWc`` template over random legal configs (blocks within a group and blocks
that merge groups), its fallback blocks, networks blocked by the alter-layout pass, ONNX
import, ``ConvertLayout`` to NHWC and a CUDA build.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import build_run, check_blocked_network
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm, relay, transform
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.graph import nn, reference
from templtune.graph.ir import Function
from templtune.graph.ops.nchwc import merged_groups, pack_data, pack_group_kernel, unpack_data
from templtune.target import Target
from templtune.templates.x86 import conv2d_nchwc_channels as grouping
from templtune.templates.x86._common import target_vector
from templtune.topi import testing as ref

TEMPLATE = "group_conv2d_NCHWc.x86"


def per_group(x: np.ndarray, k: np.ndarray, groups: int, stride: int, pad: int) -> np.ndarray:
    """The oracle: each group's convolution computed alone, stacked along the channels."""
    cg, og = x.shape[1] // groups, k.shape[0] // groups
    return np.concatenate([ref.conv2d_nchw_python(x[:, g * cg:(g + 1) * cg],
                                                  k[g * og:(g + 1) * og], stride, pad)
                           for g in range(groups)], axis=1)


def _net(c: int, groups: int, hw: int, cout: int, stride: int = 1, k: int = 3
         ) -> tuple[Function, dict[str, np.ndarray]]:
    """conv1x1 -> grouped kxk conv + bias + relu -> conv1x1 + residual-free tail."""
    rng = np.random.default_rng(0)
    def w(*shape: int) -> np.ndarray:  # unit-variance outputs: the tolerances stay relative
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32")

    params = {"w0": w(c, c, 1, 1), "wg": w(cout, c // groups, k, k),
              "bg": rng.standard_normal(cout).astype("float32"), "w1": w(c, cout, 1, 1)}
    v = {n: nn.var(n, a.shape) for n, a in params.items()}
    x = nn.var("data", (1, c, hw, hw))
    y = nn.relu(nn.conv2d(x, v["w0"]))
    y = nn.relu(nn.bias_add(nn.conv2d(y, v["wg"], strides=(stride, stride),
                                      padding=(k // 2,) * 4, groups=groups), v["bg"]))
    y = nn.conv2d(y, v["w1"])
    return Function((x, *v.values()), y), params


def test_network_op_matches_each_group_alone() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 12, 6, 7)).astype("float32")
    w = rng.standard_normal((8, 3, 3, 3)).astype("float32")
    f = Function((d := nn.var("data", x.shape), kw := nn.var("w", w.shape)),
                 nn.conv2d(d, kw, strides=(2, 2), padding=(1, 1, 1, 1), groups=4))
    assert f.body.shape == (1, 8, 3, 4)
    want = per_group(x, w, 4, 2, 1)
    np.testing.assert_allclose(reference.evaluate(f, {"w": w}, data=x), want, rtol=1e-5,
                               atol=1e-5)
    with transform.PassContext(opt_level=2):  # no alter-layout: the default schedule
        out, lib = _run(f, {"w": w}, x)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert [g.impl for g in lib.groups] == ["default"]


def _run(f: Function, params: dict, x: np.ndarray) -> tuple[np.ndarray, object]:
    from templtune.contrib import graph_executor

    lib = relay.build(f, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](templtune.cpu(0)))
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy(), lib


@pytest.mark.parametrize("groups,c,kshape,msg", [
    (3, 8, (8, 2, 3, 3), "does not match"),
    (4, 8, (6, 2, 3, 3), "does not match"),
])
def test_bad_groups_are_named(groups, c, kshape, msg) -> None:
    with pytest.raises(Exception, match=msg):
        nn.conv2d(nn.var("x", (1, c, 5, 5)), nn.var("w", kshape), groups=groups)


def _template_run(args: tuple, cfg, rng: np.random.Generator, target: str = "llvm") -> None:
    n, h, w, co, ci, kh, kw, s, p, g = args
    task = autotvm.task.create(TEMPLATE, args, target)
    with Target(target), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    mod = templtune.build(sch, tensors, target=target)
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci // g, kh, kw)).astype(np.float32)
    expect = per_group(x, k, g, s, p)
    packed = pack_group_kernel(k, g, ic_bn, oc_bn)
    assert packed.shape == tuple(int(d) for d in tensors[1].shape)
    out = np.zeros((n, co // oc_bn, *expect.shape[2:], oc_bn), np.float32)
    mod(pack_data(x, ic_bn), packed, out)
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-3, atol=1e-3, err_msg=str(cfg))


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(32, 32, 8), (64, 64, 16), (48, 48, 6), (32, 64, 4), (16, 16, 4),
                              (24, 24, 3), (64, 64, 2)]),
       hw=st.integers(4, 9), k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]),
       pick=st.integers(0, 10 ** 6))
def test_random_configs_match_each_group_alone(shape, hw, k, stride, pick) -> None:
    ci, co, g = shape
    args = (1, hw, hw + 1, co, ci, k, k, stride, k // 2, g)
    space = autotvm.task.create(TEMPLATE, args, "llvm").config_space
    idx = space.get_rand_index(rng=np.random.default_rng(pick))
    _template_run(args, space.get(idx), np.random.default_rng(pick))


@pytest.mark.parametrize("args", [(1, 7, 7, 128, 128, 3, 3, 1, 1, 32),
                                  (1, 9, 9, 208, 208, 3, 3, 2, 1, 26),
                                  (1, 6, 6, 64, 32, 3, 3, 1, 1, 16)])
def test_fallback_matches_each_group_alone(args) -> None:
    cfg = FallbackConfigEntity()
    _template_run(args, cfg, np.random.default_rng(3))
    co, ci, g = args[3], args[4], args[9]
    assert grouping.blocks_ok(g, co, ci, cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1],
                              target_vector()[0])


def test_space_holds_whole_and_merged_blocks_only() -> None:
    lanes = target_vector()[0]
    # 128 channels in 32 groups of 4: blocks merge groups, up to one register
    space = autotvm.task.create(TEMPLATE, (1, 14, 14, 128, 128, 3, 3, 1, 1, 32),
                                "llvm").config_space
    seen = set()
    for i in range(space.range_length):
        if space.is_index_valid(i):
            cfg = space.get(i)
            seen.add((cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]))
    # the neighbours' blockings are there: merged blocks waste no multiplies at any width
    assert {(lanes, lanes), (2 * lanes, 2 * lanes)} <= seen
    for ic_bn, oc_bn in seen:
        if oc_bn > 4:  # whole groups of 4, reading the one input block of their channels
            assert oc_bn % 4 == 0 and ic_bn == oc_bn
        else:  # within a group: input blocks within its 4 channels
            assert 4 % oc_bn == 0 and 4 % ic_bn == 0


@pytest.mark.parametrize("groups,co,lanes,fma,preferred,want", [
    (32, 128, 16, 16, 32, (32, 32)),  # groups of 4: every block's vectors as full: the
    (32, 128, 16, 8, 32, (32, 32)),   # neighbours' (merged groups waste no multiplies)
    (32, 1024, 16, 16, 32, (32, 32)),  # groups of 32: the neighbours' block, no merge
    (32, 512, 16, 16, 32, (32, 32)),  # 16 in a group: a zmm per group, 2 merged
    (32, 512, 16, 16, 64, (64, 64)),  # ... at whatever block the neighbours run
    (13, 104, 16, 16, 8, (8, 8)),     # groups of 8 at the neighbours' 8: no transform
    (6, 48, 16, 8, 16, (16, 16)),     # Zen 4: ymm vectors of one group each, merged
    (6, 48, 16, 16, 16, (16, 16)),    # AVX-512 units: as good as any other block
    (26, 208, 8, 8, 8, (8, 8)),       # AVX2: a group is a register
    (3, 24, 16, 16, 8, (8, 8)),       # groups of 8 within the 8-lane lane filter
])
def test_fallback_blocks(groups, co, lanes, fma, preferred, want) -> None:
    assert grouping.fallback_blocks(groups, co, co, lanes, preferred, fma) == want


@pytest.mark.parametrize("groups,co,oc_bn,lanes,want", [
    (32, 128, 32, 16, 4), (32, 256, 32, 16, 8), (32, 512, 32, 16, 16), (32, 1024, 32, 16, 16),
    (6, 48, 16, 16, 8), (32, 512, 16, 16, 16), (1, 64, 64, 16, 16)])
def test_vector_lanes_stay_within_a_group(groups, co, oc_bn, lanes, want) -> None:
    assert grouping.vector_lanes(groups, co, oc_bn, lanes) == want


@pytest.mark.parametrize("groups,co,ci,lanes,fma,want", [
    (32, 128, 128, 16, 8, 16),   # groups of 4, Zen 4: a zmm spans 4 groups
    (32, 128, 128, 16, 16, 16),  # ... and with 512-bit FMA units
    (32, 128, 128, 8, 8, 8),     # AVX2: a ymm spans 2 groups
    (32, 64, 64, 16, 8, 16),     # groups of 2
    (32, 256, 256, 16, 16, 8),   # groups of 8 would need a cross-lane permute
    (32, 256, 256, 16, 8, 8),    # ... and fill Zen 4's 256-bit units anyway
    (32, 128, 256, 16, 16, 4),   # 8 inputs per group of 4 outputs: no window of them
    (32, 128, 128, 4, 4, 4),     # SSE: a group is a register
])
def test_vector_lanes_span_narrow_groups(groups, co, ci, lanes, fma, want) -> None:
    assert grouping.vector_lanes(groups, co, 32, lanes, ci, fma) == want


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])  # the host's, AVX2
@pytest.mark.parametrize("args", [(1, 6, 7, 128, 128, 3, 3, 1, 1, 32),
                                  (1, 9, 9, 64, 64, 3, 3, 2, 1, 32),
                                  (1, 5, 5, 32, 32, 1, 1, 1, 0, 8)])
def test_spanning_vectors_read_windows(target, args) -> None:
    # narrow groups merged in a block: each vector reads a window of its groups' inputs
    # (a shuffle of one load), in sampled configs of the space, against numpy per group
    from templtune.lower.ir import Shuffle
    from templtune.te.functor import post_order
    from templtune.templates.x86._common import fma_lanes

    co, ci, g = args[3], args[4], args[9]
    tgt = Target(target)
    if not grouping.spans_groups(g, co, ci, target_vector(tgt)[0], fma_lanes(tgt)):
        pytest.skip(f"{target}: vectors hold one group each")
    task = autotvm.task.create(TEMPLATE, args, target)
    space = task.config_space
    rng = np.random.default_rng(5)
    merged = 0
    for i in range(space.range_length):
        if not space.is_index_valid(i):
            continue
        cfg = space.get(i)
        if cfg["tile_oc"].size[-1] <= co // g or rng.random() > 0.3:
            continue
        merged += 1
        with Target(target), autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
        f = templtune.lower(sch, tensors)
        assert any(isinstance(n, Shuffle) for n in post_order(f.body)), str(cfg)
        _template_run(args, cfg, rng, target)
    assert merged


@pytest.mark.parametrize("args", [(1, 56, 56, 128, 128, 3, 3, 1, 1, 32),
                                  (1, 14, 14, 64, 64, 3, 3, 2, 1, 16)])
def test_spanning_fallback_unrolls_the_taps(args) -> None:
    # vectors spanning groups shuffle a window per input and pixel: the fallback unrolls the
    # kw taps (their windows shared between neighbouring pixels) on a row block that fits
    from templtune.templates.x86._common import fma_lanes, host_vector, register_file
    from templtune.templates.x86.conv2d_nchwc_registers import spill_free

    co, ci, g = args[3], args[4], args[9]
    lanes, regs = host_vector()
    if not grouping.spans_groups(g, co, ci, lanes, fma_lanes()):
        pytest.skip("this host's vectors hold one group each")
    cfg = FallbackConfigEntity()
    _template_run(args, cfg, np.random.default_rng(6))
    ow_bn, oc_bn = cfg["tile_ow"].size[-1], cfg["tile_oc"].size[-1]
    assert oc_bn > co // g and cfg["unroll_kw"].val is True
    assert spill_free(ow_bn, oc_bn // lanes or 1, 3, regs, register_file())


def test_merged_kernel_is_split_by_group() -> None:
    k = np.arange(8 * 2 * 1 * 1, dtype=np.float32).reshape(8, 2, 1, 1) + 1
    packed = pack_group_kernel(k, 4, 4, 4)  # groups of 2 merged in pairs
    # each output lane keeps only its own group's 2 weights, no zeros between groups
    assert packed.shape == (2, 1, 1, 1, 2, 4)
    for o in range(8):
        np.testing.assert_array_equal(packed[o // 4, 0, 0, 0, :, o % 4], k[o, :, 0, 0])
    assert merged_groups(4, 8, 4) == 2
    with pytest.raises(ValueError, match="one input block"):
        pack_group_kernel(k, 4, 2, 4)  # the 2 groups' 4 input channels are one block


def test_network_op_reads_the_split_kernel() -> None:
    # the graph op's compute (its default schedule) and its numpy reference on the split form
    from templtune.graph.ops.nchwc import conv2d_nchwc

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 5, 6)).astype("float32")
    w = rng.standard_normal((16, 2, 3, 3)).astype("float32")  # 8 groups of 2 in, 2 out
    want = per_group(x, w, 8, 1, 1)
    xb, kb = pack_data(x, 8), pack_group_kernel(w, 8, 8, 8)
    assert kb.shape == (2, 1, 3, 3, 2, 8)
    d, kv = nn.var("data", xb.shape), nn.var("w", kb.shape)
    f = Function((d, kv), conv2d_nchwc(d, kv, (1, 1), (1, 1, 1, 1), groups=8))
    np.testing.assert_allclose(unpack_data(reference.evaluate(f, {"w": kb}, data=xb)), want,
                               rtol=1e-4, atol=1e-4)
    # without a config the template's fallback would choose 16-lane blocks: the build
    # refuses it (same sizes, misread data) and runs the op's own compute
    out, lib = _run(f, {"w": kb}, xb)
    assert [g.impl for g in lib.groups] == ["default"]
    np.testing.assert_allclose(unpack_data(out), want, rtol=1e-4, atol=1e-4)
    space = autotvm.task.create(TEMPLATE, (1, 5, 6, 16, 16, 3, 3, 1, 1, 8), "llvm").config_space
    cfg = next(e for e in (space.get(i) for i in range(space.range_length)
                           if space.is_index_valid(i))
               if e["tile_ic"].size[-1] == e["tile_oc"].size[-1] == 8)
    f = Function((d, kv), conv2d_nchwc(d, kv, (1, 1), (1, 1, 1, 1), cfg, groups=8))
    out, lib = _run(f, {"w": kb}, xb)
    assert [g.impl for g in lib.groups] == [f"autotvm:{TEMPLATE}"]
    np.testing.assert_allclose(unpack_data(out), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,groups,hw,cout,stride", [
    (64, 16, 8, 64, 1),    # groups of 4: merged blocks
    (208, 26, 7, 208, 2),  # RegNet's groups of 8, strided
    (96, 3, 6, 96, 1),     # groups of 32
    (32, 16, 5, 64, 1),    # a channel multiplier of 2 per group of 2
])
def test_blocked_network_matches_numpy(c, groups, hw, cout, stride) -> None:
    f, params = _net(c, groups, hw, cout, stride)
    impls = check_blocked_network(f, params)
    assert f"autotvm:{TEMPLATE}" in impls
    assert impls.count("default") <= 2  # the network's edges only: no slices, no concat


def test_onnx_grouped_conv_imports_as_one_op() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from templtune.relay import frontend

    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=8, pads=[1, 1, 1, 1],
                            strides=[1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 16, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    net, params = frontend.from_onnx(model, {"x": (1, 16, 6, 6)})
    convs = [c for c in net.calls() if c.op == "nn.conv2d"]
    assert len(convs) == 1 and convs[0].attr("groups") == 8
    assert not any(c.op in ("strided_slice", "concatenate") for c in net.calls())
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    out, _ = build_run(net, params, {"x": x})
    np.testing.assert_allclose(out, per_group(x, w, 8, 1, 1) + b[None, :, None, None],
                               rtol=1e-4, atol=1e-4)


def test_convert_layout_runs_a_grouped_conv_in_nhwc() -> None:
    f, params = _net(32, 8, 6, 32)
    seq = transform.Sequential([relay.transform.ConvertLayout({"nn.conv2d": ["NHWC",
                                                                            "default"]})])
    with transform.PassContext(opt_level=3):
        g = seq(f)
    convs = {c.attr("groups"): c for c in g.calls() if c.op == "nn.conv2d"}
    assert {k: c.attr("data_layout") for k, c in convs.items()} == {1: "NHWC", 8: "NHWC"}
    assert convs[8].args[1].shape == (3, 3, 4, 32)  # HWIO, I the channels of a group
    data = [c for c in g.calls() if c.op == "layout_transform"
            and c.attr("src_layout") in ("NCHW", "NHWC")]
    assert len(data) == 2  # the network's edges only (the others re-lay weights)
    x = np.random.default_rng(4).standard_normal((1, 32, 6, 6)).astype(np.float32)
    want = reference.evaluate(f, params, data=x)
    np.testing.assert_allclose(reference.evaluate(g, params, data=x), want, rtol=1e-4,
                               atol=1e-4)
    out, _ = build_run(g, params, {"data": x})
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_nhwc_network_op_matches_each_group_alone() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 12, 5, 6)).astype("float32")      # NCHW for the oracle
    w = rng.standard_normal((6, 4, 3, 3)).astype("float32")       # OIHW, 3 groups
    d, kw = nn.var("data", (1, 5, 6, 12)), nn.var("w", (3, 3, 4, 6))
    f = Function((d, kw), nn.conv2d(d, kw, padding=(1, 1, 1, 1), groups=3, data_layout="NHWC",
                                    kernel_layout="HWIO"))
    xh, wh = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)
    want = per_group(x, w, 3, 1, 1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(reference.evaluate(f, {"w": wh}, data=xh), want, rtol=1e-5,
                               atol=1e-5)
    out, _ = build_run(f, {"w": wh}, {"data": xh})
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_cuda_build_runs_a_grouped_conv() -> None:
    from templtune.codegen.cuda.compile import find_nvcc
    from templtune.contrib import graph_executor

    f, params = _net(32, 8, 6, 32)
    lib = relay.build(f, target="cuda", params=params)
    kernels = [k for g in lib.groups for k in g.kernels]
    if find_nvcc() is not None:
        assert all(k.binary for k in kernels)
    m = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    x = np.random.default_rng(5).standard_normal((1, 32, 6, 6)).astype(np.float32)
    m.set_input("data", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.evaluate(f, params, data=x),
                               rtol=1e-4, atol=1e-4)


def test_extract_tune_and_apply_a_grouped_conv(tmp_path) -> None:
    from templtune.autotvm.measure import LocalBuilder, LocalRunner, measure_option

    f, params = _net(64, 16, 6, 64)
    tasks = autotvm.task.extract_from_program(f, params, "llvm")
    grouped = [t for t in tasks if t.name == TEMPLATE]
    assert len(grouped) == 1 and grouped[0].args[-1] == 16
    log = str(tmp_path / "grouped.log")
    opt = measure_option(LocalBuilder(n_parallel=2), LocalRunner(number=2, repeat=1,
                                                                 cooldown_interval=0))
    tuner = autotvm.tuner.RandomTuner(grouped[0], seed=0)
    tuner.tune(n_trial=3, measure_option=opt, callbacks=[autotvm.callback.log_to_file(log)])
    x = np.random.default_rng(7).standard_normal((1, 64, 6, 6)).astype(np.float32)
    with autotvm.apply_history_best(log):
        out, lib = build_run(f, params, {"data": x})
    assert any(g.tuned and g.impl == f"autotvm:{TEMPLATE}" for g in lib.groups)
    np.testing.assert_allclose(out, reference.evaluate(f, params, data=x), rtol=1e-4,
                               atol=1e-4)


def test_a_stale_merged_record_is_skipped(tmp_path) -> None:
    # an older template ran blocks of 2 groups of 4 at ic_bn 4 (a block-diagonal kernel);
    # the split kernel reads the groups' one 8-channel input block: the record is not used
    import json
    import time

    from templtune.autotvm import record
    from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
    from templtune.graph.alter_layout import nchwc_implementation

    f, params = _net(32, 8, 6, 32)
    conv = next(c for c in f.calls() if c.op == "nn.conv2d" and c.attr("groups") == 8)
    wkl = nchwc_implementation(conv, Target("llvm")).workload
    task = autotvm.task.create(wkl[0], wkl[1:], "llvm")
    space = task.config_space
    cfg = next(c for c in (space.get(i) for i in range(space.range_length)
                           if space.is_index_valid(i))
               if c["tile_ic"].size[-1] == c["tile_oc"].size[-1] == 8)
    line = json.loads(record.encode(MeasureInput(Target("llvm"), task, cfg),
                                    MeasureResult((1e-6,), MeasureErrorNo.NO_ERROR, 1e-6,
                                                  time.time())))
    line["config"]["entity"] = [[n, k, [-1, 4] if n == "tile_ic" else v]
                                for n, k, v in line["config"]["entity"]]
    log = tmp_path / "stale.log"
    log.write_text(json.dumps(line) + "\n")
    with Target("llvm"), pytest.raises(ValueError, match="one input block"):
        stale = next(iter(record.load_from_file(str(log))))[0].config
        with autotvm.ApplyConfig(stale):
            task.func(*task.args)
    with autotvm.apply_history_best(str(log)):
        impls = check_blocked_network(f, params)
    assert f"autotvm:{TEMPLATE}" in impls
