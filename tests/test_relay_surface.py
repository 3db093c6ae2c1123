"""Relay / schedule surface of TVM tutorials: ``relay.build(mod_name=)``, ``relay.build_module``,
``relay.op.get``, ``PassContext(trace=)``, ``Schedule.normalize`` and ``create_group``."""

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
    assert seen == [("SimplifyExpr", 0, True, True), ("SimplifyExpr", 0, False, True),
                    ("FuseAttention", 0, True, True), ("FuseAttention", 0, False, True),
                    ("FuseOps", 0, True, True), ("FuseOps", 0, False, True)]


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


def test_create_group_moves_its_stages_as_one() -> None:
    n, m = 16, 12
    A = te.placeholder((n, m), name="A")
    x = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="x")
    x1 = te.compute((n, m), lambda i, j: x[i, j] + 1.0, name="x1")
    x2 = te.compute((n, m), lambda i, j: x1[i, j] + 2.0, name="x2")
    s = te.create_schedule(x2.op)
    g = s.create_group(outputs=x1, inputs=x, include_inputs=True)
    assert s[x1].group is g and s[x].group is g and s[x2].group is None
    assert g.num_child_stages == 2
    xo, xi = s[x2].split(x2.op.axis[0], factor=4)
    g.compute_at(s[x2], xo)
    assert g.attach_stage is s[x2] and g.attach_ivar is xo
    assert all(s[t].attach_stage is s[x2] for t in (x, x1))
    text = str(templtune.lower(s, [A, x2], simple_mode=True))
    # both members are computed inside x2's outer loop, on 4-row tiles
    body = text[text.index("for (i.outer"):]
    assert "allocate(x: Pointer(global float32), float32, [48])" in body
    assert "allocate(x1: Pointer(global float32), float32, [48])" in body
    f = templtune.build(s, [A, x2], target="llvm")
    a = np.random.default_rng(0).standard_normal((n, m)).astype("float32")
    out = np.zeros((n, m), "float32")
    f(a, out)
    np.testing.assert_allclose(out, a * 2 + 3, rtol=1e-6)
    # a group without its input: only x1 follows; x stays at the root
    s2 = te.create_schedule(x2.op)
    g2 = s2.create_group(outputs=x1, inputs=x)
    assert [st.op.name for st in g2.members] == ["x1"]
    g2.compute_at(s2[x2], x2.op.axis[0])
    assert s2[x].attach_type == "root" and s2[x1].attach_stage is s2[x2]
    f2 = templtune.build(s2, [A, x2], target="llvm")
    f2(a, out)
    np.testing.assert_allclose(out, a * 2 + 3, rtol=1e-6)
