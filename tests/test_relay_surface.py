"""Relay / schedule surface of TVM tutorials: ``relay.build(mod_name=)``, ``relay.build_module``,
``relay.op.get``, ``PassContext(trace=)`` and ``Schedule.normalize``."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import relay, te, transform
from templtune.contrib import graph_executor


def _net():
    x = relay.var("data", shape=(1, 8))
    w = relay.var("w", shape=(4, 8))
    net = relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w)))
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 8)).astype("float32")}
    return net, params, rng.standard_normal((1, 8)).astype("float32")


def test_build_mod_name_and_build_module() -> None:
    net, params, data = _net()
    lib = relay.build_module.build(net, target="llvm", params=params, mod_name="mynet")
    assert relay.build_module.build is relay.build
    m = graph_executor.GraphModule(lib["mynet"](templtune.cpu()))
    m.set_input("data", data)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), relay.evaluate(net, params, data=data),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(KeyError, match="'mynet'"):
        lib["default"]
    assert relay.build(net, target="llvm", params=params)["default"] is not None


def test_op_get() -> None:
    op = relay.op.get("nn.conv2d")
    assert op.name == "nn.conv2d"
    assert relay.op.get("nn.dense").name == "nn.dense"
    with pytest.raises(relay.GraphError, match="unknown operator 'nn.nope'"):
        relay.op.get("nn.nope")


def test_pass_context_trace_sees_fuse_ops() -> None:
    net, params, _ = _net()
    seen = []

    def trace(mod, info, is_before):
        seen.append((info.name, info.opt_level, is_before, mod is net))

    with transform.PassContext(opt_level=3, trace=trace):
        relay.build(net, target="llvm", params=params)
    assert seen == [("FuseOps", 0, True, True), ("FuseOps", 0, False, True)]


def test_schedule_normalize_keeps_offset_reductions_correct() -> None:
    A = te.placeholder((8,), name="A")
    k = te.reduce_axis((2, 6), name="k")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    text = str(templtune.lower(s, [A, B], simple_mode=True))
    s2 = s.normalize()
    assert str(templtune.lower(s2, [A, B], simple_mode=True)) == text
    assert "for (k: int32, 0, 4)" in text and "(k + 2)" in text
    f = templtune.build(s2, [A, B], target="llvm")
    a = np.arange(8, dtype="float32")
    b = np.zeros(1, dtype="float32")
    f(a, b)
    assert b[0] == a[2:6].sum()
