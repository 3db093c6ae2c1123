"""AlterOpLayout: NCHW[x]c convolutions with blocked activations between them; the built
network matches the numpy reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import check_blocked_network

from templtune.graph import reference
from templtune.graph.alter_layout import alter_op_layout
from templtune.graph.build import build
from templtune.graph.ops.nchwc import transform_array
from templtune.graph.testing import mobilenet, resnet
from templtune.graph.transform import PassContext


def _ops(func) -> list[str]:
    return [c.op for c in func.calls()]


def test_resnet_keeps_activations_blocked():
    mod, params = resnet.get_workload(18, image_shape=(3, 32, 32), num_classes=10)
    new, new_params = alter_op_layout(mod, params, "llvm")
    ops = _ops(new)
    assert ops.count("nn.contrib_conv2d_NCHWc") == _ops(mod).count("nn.conv2d")
    assert "nn.conv2d" not in ops and ops.count("nn.bias_add") == 1  # the dense's
    # the fallback blocks of consecutive layers agree: only the input is re-laid
    assert ops.count("layout_transform") == 1
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(reference.evaluate(new, new_params, data=x),
                               reference.evaluate(mod, params, data=x), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_resnet18_matches_reference():
    mod, params = resnet.get_workload(18, image_shape=(3, 64, 64), num_classes=10)
    impls = check_blocked_network(mod, params)
    # every conv blocked; the untuned 3x3 stride-1 layers of >= 100 output pixels on Winograd
    wino = impls.count("autotvm:conv2d_NCHWc_winograd")
    assert impls.count("autotvm:conv2d_NCHWc") + wino == 20 and wino > 0, impls


@pytest.mark.slow
def test_mobilenet_matches_reference():
    mod, params = mobilenet.get_workload(image_shape=(3, 64, 64), num_classes=10)
    impls = check_blocked_network(mod, params)
    assert impls.count("autotvm:conv2d_NCHWc") == 14


def test_off_below_opt_level_3_and_when_disabled():
    mod, params = resnet.get_workload(18, image_shape=(3, 32, 32), num_classes=10)
    assert not PassContext(opt_level=2).alter_layout
    assert not PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]).alter_layout
    assert not PassContext(opt_level=3, config={"templtune.graph.alter_layout": False}
                           ).alter_layout
    assert PassContext(opt_level=3).alter_layout
    with PassContext(opt_level=2):
        lib = build(mod, "llvm", params)
    assert "autotvm:conv2d_NCHWc" not in [g.impl for g in lib.groups]


@pytest.mark.parametrize("src,dst", [("NCHW", "NCHW8c"), ("NCHW16c", "NCHW"),
                                     ("NCHW8c", "NCHW32c"), ("NCHW32c", "NCHW16c")])
def test_transform_array_round_trips(src, dst):
    x = np.arange(2 * 64 * 3 * 2, dtype=np.float32).reshape(2, 64, 3, 2)
    a = transform_array(x, "NCHW", src)
    back = transform_array(transform_array(a, src, dst), dst, "NCHW")
    np.testing.assert_array_equal(back, x)
    if dst != "NCHW":
        b = int(dst[4:-1])
        assert transform_array(a, src, dst)[1, 1, 2, 1, 3] == x[1, b + 3, 2, 1]


def test_mobilenet_depthwise_runs_blocked():
    mod, params = mobilenet.get_workload(image_shape=(3, 32, 32), num_classes=10)
    new, new_params = alter_op_layout(mod, params, "llvm")
    ops = _ops(new)
    assert ops.count("nn.contrib_depthwise_conv2d_NCHWc") == 13
    assert ops.count("layout_transform") == 1 and "nn.conv2d" not in ops
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(reference.evaluate(new, new_params, data=x),
                               reference.evaluate(mod, params, data=x), rtol=1e-5, atol=1e-6)
