"""TVM names that ported tutorials import: ``testing``, ``relay`` (as a package), ``contrib``
(``graph_executor``, ``graph_runtime``, ``cc``, ``utils``) and ``tir``.

Imports are checked in fresh interpreters (an earlier attribute access in this process would
hide a missing module); the oracles are numpy, the system C compiler and ctypes.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import templtune
from templtune import te, testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


# ----------------------------------------------------------------------------- testing
def test_assert_allclose_defaults_and_shape_check() -> None:
    a = np.array([1.0, 2.0, 3.0])
    testing.assert_allclose(a, a + 5e-8)
    # TVM's defaults are rtol = atol = 1e-7, far tighter than numpy's allclose
    with pytest.raises(AssertionError):
        testing.assert_allclose(a, a * (1 + 1e-5))
    testing.assert_allclose(a, a * (1 + 1e-5), rtol=1e-4)
    # numpy would broadcast (3,) against (1, 3); a tutorial check must not
    with pytest.raises(AssertionError, match="shapes differ"):
        testing.assert_allclose(a, a[None, :])
    # actual and desired are not interchangeable: the tolerance scales with |desired|
    with pytest.raises(AssertionError):
        testing.assert_allclose(np.array([1.0]), np.array([0.0]), rtol=10.0, atol=0)


def test_assert_allclose_takes_ndarrays() -> None:
    x = np.arange(6, dtype="float32").reshape(2, 3)
    testing.assert_allclose(templtune.nd.array(x), x)
    with pytest.raises(AssertionError):
        testing.assert_allclose(templtune.nd.array(x), x + 1)


def test_enabled_targets_always_has_llvm() -> None:
    kinds = [t for t, _ in testing.enabled_targets()]
    assert kinds[0] == "llvm"
    assert testing.device_enabled("llvm -mcpu=core-avx2")
    assert not testing.device_enabled("opencl")
    assert ("cuda" in kinds) == testing.device_enabled("cuda")


# ----------------------------------------------------------------------------- imports
def test_tutorial_import_lines_in_a_fresh_interpreter() -> None:
    proc = _python("""
        import templtune
        import templtune.testing
        import templtune.relay.testing
        from templtune import relay, auto_scheduler
        from templtune.contrib import graph_runtime, graph_executor, cc, utils
        import templtune.contrib.graph_executor
        import templtune.tir
        from templtune import graph
        assert relay is templtune.relay
        assert relay.testing.resnet is graph.testing.resnet
        assert relay.build is graph.build and relay.nn is graph.nn
        assert graph_runtime.GraphModule is graph.GraphModule
        assert templtune.testing.assert_allclose is not None
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_relay_reexports_every_graph_name() -> None:
    from templtune import graph, relay

    for name in graph.__all__:
        if name != "testing":
            assert getattr(relay, name) is getattr(graph, name), name
    assert relay.testing.get_network is graph.testing.get_network


# ----------------------------------------------------------------------------- contrib
def test_tempdir_relpath_listdir_remove() -> None:
    from templtune.contrib import utils

    tmp = utils.tempdir()
    with open(tmp.relpath("a.txt"), "w") as f:
        f.write("x")
    assert tmp.listdir() == ["a.txt"]
    assert os.path.dirname(tmp.relpath("a.txt")) == tmp.path
    tmp.remove()
    assert not os.path.exists(tmp.path)
    with utils.tempdir() as t2:
        path = t2.path
        assert os.path.isdir(path)
    assert not os.path.exists(path)


def test_cc_create_shared_links_real_objects(tmp_path) -> None:
    from templtune.contrib import cc
    from templtune.errors import CodegenError

    src = tmp_path / "add.c"
    src.write_text("int add3(int a, int b, int c) { return a + b + c; }\n")
    obj = tmp_path / "add.o"
    subprocess.run(["gcc", "-c", "-fPIC", "-o", str(obj), str(src)], check=True)
    so = str(tmp_path / "libadd.so")
    cc.create_shared(so, [str(obj)])
    with open(so, "rb") as f:
        assert f.read(4) == b"\x7fELF"
    assert ctypes.CDLL(so).add3(1, 2, 39) == 42
    with pytest.raises(CodegenError, match="linking"):
        cc.create_shared(str(tmp_path / "bad.so"), [str(tmp_path / "missing.o")])


def test_graph_executor_create_runs_a_network() -> None:
    from templtune import relay
    from templtune.contrib import graph_executor, graph_runtime

    x = relay.var("data", shape=(1, 8))
    w = relay.var("w", shape=(4, 8))
    net = relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w)))
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 8)).astype("float32")}
    data = rng.standard_normal((1, 8)).astype("float32")
    lib = relay.build(net, target="llvm", params=params)
    want = relay.evaluate(net, params, data=data)
    for m in (graph_executor.create(lib, templtune.cpu()), graph_runtime.GraphModule(lib["default"](templtune.cpu()))):
        m.set_input("data", data)
        m.run()
        testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(relay.GraphError, match="library returned by relay.build"):
        graph_executor.create("{}", None, templtune.cpu())


# ----------------------------------------------------------------------------- tir
def test_tir_indexmod_in_the_te_tutorial_packing() -> None:
    from templtune import tir

    M, K, N, bn = 16, 8, 32, 8
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    packedB = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * packedB[y // bn, k, tir.indexmod(y, bn)],
                                                axis=k), name="C")
    s = te.create_schedule(C.op)
    f = templtune.build(s, [A, B, C], target="llvm")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = np.zeros((M, N), dtype="float32")
    f(a, b, c)
    testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert tir.indexdiv is tir.floordiv
    i = te.var("i")
    assert str(tir.indexmod(i, 4)) == str(te.floormod(i, 4))
