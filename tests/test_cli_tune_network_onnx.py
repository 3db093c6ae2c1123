"""``templtune tune-network MODEL.onnx --input-shape NAME:D0,...``: the real command on model
files written to disk (one built with onnx.helper, one exported from torchvision)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from templtune.cli.main import main

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _small_cnn(path, batch="n", op="Sigmoid") -> str:
    """Conv -> SiLU (Sigmoid, broadcast-free Mul) -> GAP -> Flatten -> Gemm, batch dynamic."""
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)

    nodes = [helper.make_node("Conv", ["data", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c0"], ["s0"], name="act"),
             helper.make_node("Mul", ["c0", "s0"], ["m0"]),
             helper.make_node("GlobalAveragePool", ["m0"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    g = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("data", TensorProto.FLOAT,
                                                       [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        initializer=[w("w0", (8, 3, 3, 3)), w("b0", (8,)), w("wf", (10, 8)), w("bf", (10,))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_onnx_model_compiles_checks_and_times(capsys, tmp_path):
    model = _small_cnn(tmp_path / "small.onnx")
    rc, out, _ = run(capsys, "tune-network", model, "--input-shape", "data:2,3,16,16",
                     "--log", str(tmp_path / "none.json"), "--timing-repeat", "1",
                     "--timing-ms", "1")
    assert rc == 0, out
    assert "small.onnx: 3 tasks" in out and "fused_nn_conv2d_nn_bias_add" in out
    assert "check: the compiled network matches numpy" in out
    assert "Mean inference time (std dev):" in out


@pytest.mark.parametrize("extra, msg", [
    (("--input-shape", "image:1,3,16,16"), "--input-shape names ['image'], but the model's "
                                            "inputs are ['data']"),
    (("--input-shape", "1,3,16,16"), "--input-shape takes NAME:D0,D1,..."),
    ((), "input 'data' has dynamic shape"),
])
def test_bad_onnx_arguments_give_one_clear_line(capsys, tmp_path, extra, msg):
    model = _small_cnn(tmp_path / "small.onnx")
    rc, _, err = run(capsys, "tune-network", model, *extra)
    assert rc != 0
    assert msg in err


def test_nhwc_layout_converts_the_onnx_model(capsys, tmp_path):
    model = _small_cnn(tmp_path / "small.onnx")
    rc, out, _ = run(capsys, "tune-network", model, "--input-shape", "data:2,3,16,16",
                     "--layout", "NHWC", "--log", str(tmp_path / "none.json"),
                     "--timing-repeat", "1", "--timing-ms", "1")
    assert rc == 0, out
    assert "converted the model's convolutions to NHWC (ConvertLayout)" in out
    assert "small.onnx: 3 tasks" in out
    assert "check: the compiled network matches numpy" in out


@pytest.mark.slow
def test_tune_an_onnx_model_in_nhwc(capsys, tmp_path):
    """The auto-scheduler tunes the converted (NHWC) tasks and the build uses the records."""
    from templtune import auto_scheduler, graph
    from templtune.cli.tune_network_cmd import convert_to_nhwc

    model = _small_cnn(tmp_path / "small.onnx")
    log = str(tmp_path / "s.json")
    rc, out, _ = run(capsys, "tune-network", model, "--input-shape", "data:1,3,16,16",
                     "--layout", "NHWC", "--trials", "4", "--per-round", "1", "--model",
                     "random", "--log", log, "--timing-repeat", "1", "--timing-ms", "1",
                     "--no-progress")
    assert rc == 0, out
    assert "tuned 4 trials" in out and "(0 from tuning records)" not in out
    assert "check: the compiled network matches numpy" in out
    mod, params = graph.frontend.from_onnx(model, shape={"data": (1, 3, 16, 16)})
    nhwc = {t.workload_key for t in auto_scheduler.extract_tasks(convert_to_nhwc(mod), params)[0]}
    nchw = {t.workload_key for t in auto_scheduler.extract_tasks(mod, params)[0]}
    tuned = {inp.task.workload_key for inp, _ in auto_scheduler.load_records(log)}
    assert tuned <= nhwc and tuned - nchw  # the NHWC conv and pooling tasks, not the NCHW ones
    assert any("[1, 16, 16, 3], [3, 3, 3, 8]" in k for k in tuned)


def test_unsupported_operators_and_missing_file_are_named(capsys, tmp_path):
    model = _small_cnn(tmp_path / "odd.onnx", batch=1, op="Celu")
    rc, _, err = run(capsys, "tune-network", model)
    assert rc != 0 and "does not support: Celu (node 'act')" in err
    rc, _, err = run(capsys, "tune-network", str(tmp_path / "nope.onnx"))
    assert rc != 0 and "does not exist" in err


@pytest.mark.slow
def test_tune_a_small_onnx_model(capsys, tmp_path):
    model = _small_cnn(tmp_path / "small.onnx")
    log = str(tmp_path / "s.json")
    rc, out, _ = run(capsys, "tune-network", model, "--input-shape", "data:1,3,16,16",
                     "--trials", "4", "--per-round", "1", "--model", "random", "--log", log,
                     "--timing-repeat", "1", "--timing-ms", "1")
    assert rc == 0, out
    with open(log) as f:
        assert sum(1 for _ in f) >= 3
    assert "tuned 4 trials" in out and "(0 from tuning records)" not in out
    assert "check: the compiled network matches numpy" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "efficientnet_b0"])
def test_tune_torchvision_export(capsys, tmp_path, name):
    """The issue's command on a torchvision export, with one trial per task."""
    from test_graph_onnx_models import _torchvision

    tv = _torchvision()
    import torch

    from templtune import auto_scheduler, graph

    torch.manual_seed(0)
    buf = io.BytesIO()
    model = getattr(tv.models, name)(weights=None).eval()
    torch.onnx.export(model, (torch.randn(1, 3, 32, 32),), buf, opset_version=17, dynamo=False,
                      input_names=["data"], dynamic_axes={"data": {0: "batch"}})
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(buf.getvalue())
    mod, params = graph.frontend.from_onnx(str(path), shape={"data": (1, 3, 32, 32)})
    n_tasks = len(auto_scheduler.extract_tasks(mod, params, "llvm")[0])
    log = str(tmp_path / "tune.json")
    rc, out, _ = run(capsys, "tune-network", str(path), "--input-shape", "data:1,3,32,32",
                     "--trials", str(n_tasks), "--per-round", "1", "--model", "random",
                     "--log", log, "--timing-repeat", "1", "--timing-ms", "1", "--no-progress")
    assert rc == 0, out
    assert f"{name}.onnx: {n_tasks} tasks" in out and f"tuned {n_tasks} trials" in out
    with open(log) as f:
        assert sum(1 for _ in f) >= n_tasks
    assert "(0 from tuning records)" not in out
    assert "check: the compiled network matches numpy" in out
