"""benchmarks/inference.py's cross-check path on a tiny network, with the peers installed here
(ONNX Runtime, OpenVINO, PyTorch: each skipped when missing), so the script cannot rot."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

onnx = pytest.importorskip("onnx")

import inference  # noqa: E402
import peers  # noqa: E402

from templtune import graph  # noqa: E402
from templtune.graph import nn  # noqa: E402
from templtune.graph.ir import Function  # noqa: E402


def tiny_net() -> tuple[Function, dict[str, np.ndarray]]:
    """Every op the exporter maps: conv (+bias), relu, max-pool, a residual add, a depthwise
    conv whose bias is not folded, global pooling, flatten, dense (+bias), softmax."""
    rng = np.random.default_rng(1)

    def p(shape: tuple[int, ...]) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype("float32")

    params = {"w1": p((8, 3, 3, 3)), "b1": p((8,)), "w2": p((8, 1, 3, 3)), "b2": p((8,)),
              "wd": p((5, 8)), "bd": p((5,))}
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    data = nn.var("data", (1, 3, 12, 12))
    y = nn.relu(nn.bias_add(nn.conv2d(data, v["w1"], strides=(2, 2), padding=(1, 1)), v["b1"]))
    y = nn.max_pool2d(y, (3, 3), (1, 1), (1, 1))
    z = nn.conv2d(y, v["w2"], padding=(1, 1), groups=8)
    y = nn.add(nn.bias_add(z, v["b2"]), nn.relu(z))  # z has two users: no bias folding
    y = nn.batch_flatten(nn.global_avg_pool2d(y))
    y = nn.softmax(nn.bias_add(nn.dense(y, v["wd"]), v["bd"]), axis=1)
    return Function((data, *v.values()), y), params


def _input() -> np.ndarray:
    return np.random.default_rng(0).uniform(size=(1, 3, 12, 12)).astype("float32")


def test_onnx_export_matches_numpy_interpreter():
    from onnx.reference import ReferenceEvaluator

    net, params = tiny_net()
    x = _input()
    model = peers.to_onnx(net, params)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 2 and "Softmax" in ops and "Gemm" in ops
    conv_inputs = [len(n.input) for n in model.graph.node if n.op_type == "Conv"]
    assert conv_inputs == [3, 2]  # the first conv's bias folded, the shared one's not
    got = ReferenceEvaluator(model).run(None, {"data": x})[0]
    np.testing.assert_allclose(got, graph.evaluate(net, params, data=x), rtol=1e-5, atol=1e-6)


def test_every_installed_engine_agrees_on_the_tiny_network():
    net, params = tiny_net()
    x = _input()
    engines = [peers.templtune_engine("templtune", net, params, x)]
    found, skipped = peers.peer_engines(net, params, x)
    engines += found
    ref = graph.evaluate(net, params, data=x)
    lines: list[str] = []
    outputs = {e.name: e.prepare(1)() for e in engines}
    bad = inference.check(outputs, ref, {e.name: e.gated for e in engines}, 1e-3, lines.append)
    assert bad == [], lines
    assert len(lines) == len(engines)
    ms = inference.time_engines({e.name: e.prepare(2) for e in engines}, rounds=1, number=1,
                                settle=0.0)
    assert set(ms) == {e.name for e in engines} and all(t > 0 for t in ms.values())
    assert len(found) + len(skipped) == len(inference.PEERS)


def test_check_flags_a_gated_mismatch_only():
    ref = np.array([[1.0, 2.0, 4.0]], "float32")
    outs = {"a": ref.copy(), "b": ref + 0.01, "c": ref + 0.01}
    lines: list[str] = []
    bad = inference.check(outs, ref, {"a": True, "b": True, "c": False}, 1e-3, lines.append)
    assert bad == ["b"]
    assert "MISMATCH" in lines[1] and "not gated" in lines[2]


def test_network_flops_counts_multiply_adds():
    net, _ = inference.seed_layer()
    assert inference.network_flops(net) == 2 * 512 * 7 * 7 * 512 * 9
    tiny, _ = tiny_net()
    expected = 2 * (8 * 6 * 6 * 3 * 9 + 8 * 6 * 6 * 1 * 9 + 5 * 8)
    assert inference.network_flops(tiny) == expected


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_network_flops_of_batch_matmul_under_its_flags(ta, tb):
    # [2, M=3, K=5] x [2, N=4, K=5] in whichever layout the flags say
    x = nn.var("x", (2, 5, 3) if ta else (2, 3, 5))
    y = nn.var("y", (2, 4, 5) if tb else (2, 5, 4))
    net = Function((x, y), nn.batch_matmul(x, y, transpose_a=ta, transpose_b=tb))
    assert inference.network_flops(net) == 2 * 2 * 3 * 4 * 5


def test_isolated_engines_agree_and_time_themselves(tmp_path):
    """``--isolate``: each engine built and timed in a process of its own; the outputs still
    cross-checked against numpy and the timings reported (the seed layer, one thread)."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / "inference.txt"
    rc = inference.main(["--models", "conv2d-seed", "--engines", "ort", "--threads", "1",
                         "--rounds", "1", "--number", "1", "--isolate", "--out", str(out)])
    text = out.read_text()
    assert rc == 0, text
    checks = [ln for ln in text.splitlines() if ln.strip().startswith("check ")]
    assert len(checks) == 2 and all(ln.endswith(" ok") for ln in checks), checks
    rows = [ln for ln in text.splitlines() if "templtune/engine speed" in ln]
    assert len(rows) == 2 and rows[0].split()[-1] == "1.00"
    assert "ONNX Runtime" in rows[1] and float(rows[1].split("ms")[0].split()[-1]) > 0


def test_isolated_child_reports_a_missing_peer():
    import isolate

    (child,) = isolate.start(["no-such-engine"], "conv2d-seed", None, 1)
    child.close()
    assert child.ready.skipped and not child.ready.name


def _onnx_file(path: Path, batch: int | str = 1) -> Path:
    """A one-layer transformer-style ONNX file: x [1, 4, 8] @ W + b, GELU-free, softmax."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype("float32"), "W")
    b = numpy_helper.from_array(rng.standard_normal(6).astype("float32"), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Add", ["h", "B"], ["y"]),
             helper.make_node("Softmax", ["y"], ["out"], axis=-1)]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [batch, 4, 8])], [helper.make_tensor_value_info(
            "out", TensorProto.FLOAT, None)], [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_an_onnx_file_is_a_model_whose_peers_load_the_file(tmp_path):
    import models

    path = _onnx_file(tmp_path / "tiny.onnx")
    name = str(path)
    net, params = models.load_model(name)
    assert models.display_name(name) == "tiny"
    assert models.network_flops(net) == 2.0 * 4 * 6 * 8
    from isolate import model_input

    x = model_input(net, params)
    engines, skipped = peers.peer_engines(net, params, x, ("ort", "torch"),
                                          onnx_file=models.onnx_file(name))
    assert skipped[-1] == "torch: runs zoo networks only"
    ref = graph.evaluate(net, params, x=x)
    for e in [peers.templtune_engine("templtune", net, params, x), *engines]:
        np.testing.assert_allclose(e.prepare(1)(), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="symbolic dimensions"):
        models.load_model(str(_onnx_file(tmp_path / "dyn.onnx", batch="N")))
