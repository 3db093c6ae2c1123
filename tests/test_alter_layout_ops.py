"""AlterOpLayout past ResNet's ops: squeeze-excitation, SiLU and hard-swish tails, channel
concatenation and unfolded batch norm stay blocked (MobileNetV3, EfficientNet, SqueezeNet,
DenseNet); the fallback channel blocks fill whole vector registers. Oracle: the numpy
reference interpreter on the original network, and the built network against it."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import check_blocked_network

from templtune.graph import nn, reference
from templtune.graph.alter_layout import alter_op_layout
from templtune.graph.ir import Function
from templtune.graph.ops.elemwise import binary, unary
from templtune.templates.x86.conv2d_nchwc import fallback_block

RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) or 1
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


class _Net:
    """A network under construction: ``p(name, value)`` binds a parameter."""

    def __init__(self) -> None:
        self.params: dict[str, np.ndarray] = {}
        self.vars: list = []

    def p(self, name: str, value: np.ndarray):
        self.params[name] = value
        self.vars.append(nn.var(name, value.shape))
        return self.vars[-1]

    def func(self, data, body, name: str):
        return Function((data, *self.vars), body, name), self.params

    def conv(self, x, name: str, co: int, k: int = 1, groups: int = 1):
        ci = x.shape[1] // groups
        y = nn.conv2d(x, self.p(name, _w(co, ci, k, k)), padding=k // 2, groups=groups)
        return nn.bias_add(y, self.p(name + "_b", _w(co)))


def _se_net():
    """conv -> SiLU -> depthwise -> squeeze-excitation (hard sigmoid) -> 24-channel conv ->
    per-channel constant scale -> + scalar -> hard-swish."""
    n = _Net()
    data = nn.var("data", (1, 16, 10, 10))
    x = n.conv(data, "c1", 32, 3)
    x = binary("multiply", x, unary("sigmoid", x))
    x = unary("nn.relu", n.conv(x, "dw", 32, 3, groups=32))
    s = nn.global_avg_pool2d(x)
    s = n.conv(nn.relu(n.conv(s, "se1", 8)), "se2", 32)
    x = binary("multiply", x, unary("nn.hard_sigmoid", s, alpha=1 / 6, beta=0.5))
    x = n.conv(x, "c2", 24)
    x = binary("multiply", x, n.p("scale", _w(24, 1, 1)))
    x = nn.add(x, n.p("one", np.ones((1,), np.float32)))
    x = unary("nn.hard_swish", x)
    return n.func(data, n.conv(x, "c3", 16), "se")


def _concat_net():
    """Two convs and the input concatenated, an unfolded batch norm and relu, then a conv
    (DenseNet)."""
    n = _Net()
    data = nn.var("data", (1, 32, 8, 8))
    a, b = n.conv(data, "a", 32), n.conv(data, "b", 32, 3)
    x = nn.concatenate([a, data, b], axis=1)
    c = x.shape[1]
    x = nn.batch_norm(x, n.p("g", _w(c) + 1), n.p("beta", _w(c)), n.p("m", _w(c)),
                      n.p("v", np.abs(_w(c)) + 0.5))
    return n.func(data, n.conv(nn.relu(x), "c", 32), "cat")


def _spatial_net():
    """A product with a [1, 1, H, W] map: the channel axis broadcasts, so it runs plain."""
    n = _Net()
    data = nn.var("data", (1, 16, 8, 8))
    x = n.conv(data, "a", 32)
    att = unary("sigmoid", n.conv(x, "att", 1))
    return n.func(data, n.conv(binary("multiply", x, att), "c", 16), "spatial")


def _transforms(func) -> int:
    return [c.op for c in func.calls()].count("layout_transform")


def _input(mod) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(mod.params[0].shape).astype(np.float32)


@pytest.mark.parametrize("make,transforms", [(_se_net, 2), (_concat_net, 2),
                                             (_spatial_net, 5)])
def test_blocked_network_matches_reference(make, transforms):
    mod, params = make()
    new, new_params = alter_op_layout(mod, params, "llvm -mcpu=skylake-avx512")
    # the input (once, for the conv and the concat) and the output; the spatial map's
    # product runs plain: both operands out of blocks, the product back into them
    assert _transforms(new) == transforms
    assert "nn.batch_norm" not in [c.op for c in new.calls()]
    x = _input(mod)
    np.testing.assert_allclose(reference.evaluate(new, new_params, data=x),
                               reference.evaluate(mod, params, data=x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [_se_net, _concat_net])
def test_built_blocked_network_matches_reference(make):
    mod, params = make()
    # NOTE: the squeeze-excitation product is larger than its 1x1 conv: a second kernel
    impls = check_blocked_network(mod, params, _input(mod), fused=False)
    assert "autotvm:conv2d_NCHWc" in impls and "autotvm:conv2d_nchw" not in impls


def test_shared_constant_is_packed_once():
    n = _Net()
    data = nn.var("data", (1, 16, 4, 4))
    scale = n.p("scale", _w(1, 32, 1, 1))
    x = n.conv(data, "a", 32)
    y = binary("multiply", binary("multiply", x, scale), scale)
    new, new_params = alter_op_layout(*n.func(data, n.conv(y, "c", 16), "s"), "llvm")
    names = [v.name for v in new.params]
    assert len(names) == len(set(names))
    assert sum("scale" in k for k in new_params) == 1


@pytest.mark.parametrize("n,lanes,block", [
    (64, 16, 32), (48, 16, 16), (1000, 16, 8), (440, 16, 8), (24, 16, 8), (144, 16, 16),
    (24, 8, 8), (1000, 8, 8), (96, 8, 16), (3, 16, 3), (58, 16, 32), (116, 16, 32),
    (58, 8, 16), (12, 16, 4), (20, 16, 8), (36, 16, 8), (44, 16, 16)])
def test_fallback_block_fills_whole_registers(n, lanes, block):
    # a 40-channel block is 2.5 zmm, a 58-channel one 3.6: LLVM splits their vectors (17-20x
    # slower than 8- or 4-lane blocks); 58 channels pad to two zmm registers (64 lanes), 20
    # to one ymm (24), 36 to 40, 44 to 48
    assert fallback_block(n, lanes) == block
