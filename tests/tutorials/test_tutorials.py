"""TVM's tutorials, ported by changing only their import lines (issue 17's "done means").

Each script in ``scripts/`` follows one tutorial's calls in order, written against TVM
(``import tvm``); :mod:`port` rewrites its import lines, and nothing else, and the result runs in
a fresh interpreter in a temporary directory (the logs a tutorial writes land there). What each
tutorial computes is checked by the tutorial itself (``assert_allclose`` against numpy); the
test also checks what it prints and writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .port import port

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def run_tutorial(name: str, tmp_path: Path, timeout: float = 900,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    source, changed = port((HERE / "scripts" / f"{name}.py").read_text())
    assert changed >= 1
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-6000:])
    return proc


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_port_changes_import_lines_only() -> None:
    src = "import tvm\nfrom tvm import te\nimport tvm.testing\nfrom tvm.contrib import utils\nx = 1\n"
    out, changed = port(src)
    assert changed == 4
    assert out.splitlines()[0] == "import templtune as tvm"
    assert out.splitlines()[-1] == "x = 1"
    with pytest.raises(AssertionError):
        port("x = __import__('tvm')\nfrom   tvm import te as t2  # odd spacing is ported\n"
             "if True: import tvm\n")


@pytest.mark.slow
def test_autotvm_matmul_x86(tmp_path) -> None:
    proc = run_tutorial("autotvm_matmul_x86", tmp_path)
    # the space repr TVM prints, and the per-trial DEBUG lines on TVM's logger name
    assert "ConfigSpace (len=100, range_length=100, space_map=" in proc.stdout
    assert "tile_y: Split(policy=factors, product=512, num_outputs=2) len=10" in proc.stdout
    assert proc.stdout.count("No: ") == 10
    recs = _records(tmp_path / "matmul.log")
    assert len(recs) == 10 and all(r["input"][1] == "tutorial/matmul" for r in recs)


@pytest.mark.slow
def test_tune_conv2d_cuda_on_the_emulator(tmp_path) -> None:
    proc = run_tutorial("tune_conv2d_cuda", tmp_path)
    assert "ConfigSpace (len=10454400, range_length=10454400, space_map=" in proc.stdout
    assert "Best config:" in proc.stdout and "Time cost of this operator:" in proc.stdout
    assert "emulat" in proc.stderr.lower()  # the one warning: CPU timings, not a GPU's
    recs = _records(tmp_path / "conv2d.log")
    assert len(recs) == 6


@pytest.mark.slow
def test_seed_000_auto_scheduling_a_conv_layer_for_gpu(tmp_path) -> None:
    proc = run_tutorial("tune_conv2d_layer_cuda", tmp_path)
    out = proc.stdout
    assert "data = PLACEHOLDER [1, 512, 7, 7]" in out
    assert "Lowered TIR:" in out and "Execution time of this operator:" in out
    assert "s[" in out.split("Equivalent python schedule:")[1]  # schedule API lines
    assert "__global__" in out.split("CUDA source code:")[1]
    assert "Resume search:" in out
    lines = [x for x in (tmp_path / "conv2d.json").read_text().splitlines() if x.strip()]
    assert len(lines) == 4 + 2  # the first search, then the resumed one, in one log


@pytest.mark.slow
def test_seed_003_auto_scheduling_a_network_for_x86(tmp_path) -> None:
    proc = run_tutorial("tune_network_x86", tmp_path, timeout=1500)
    out = proc.stdout
    n_tasks = out.count("========== Task ")
    assert n_tasks == 28  # resnet-50 NHWC: 28 distinct subgraphs here (TVM prints 29)
    assert "Latency (ms) | Speed (GFLOPS) | Trials |" in out  # the task scheduler table
    assert "Mean inference time (std dev):" in out
    lines = (tmp_path / "resnet-50-NHWC-B1-llvm.json").read_text().splitlines()
    assert len([x for x in lines if x.strip()]) == 28 + 28


@pytest.mark.slow
def test_x86_network_tutorial_newer_text_with_use_sparse(tmp_path) -> None:
    # TVM 0.9+'s text of seed 003 (graph_executor, module.benchmark) with use_sparse = True:
    # the dense layer becomes block-sparse and is tuned with the sparse sketch rules
    proc = run_tutorial("tune_network_x86_sparse", tmp_path, timeout=1500)
    out = proc.stdout
    blocks = out.split("========== Task ")[1:]
    assert len(blocks) == 28  # resnet-50 NHWC with its dense layer as bsr sparse_dense
    sparse = [b for b in blocks if "T_sparse_dense" in b]
    assert len(sparse) == 1
    sparse_key = sparse[0].split("workload key: ")[1].split(") ==========")[0]
    assert "Latency (ms) | Speed (GFLOPS) | Trials |" in out
    summary = out.split("Execution time summary:\n")[1].splitlines()
    assert summary[0].split() == ["mean", "(ms)", "median", "(ms)", "max", "(ms)", "min", "(ms)",
                                  "std", "(ms)"]
    assert float(summary[1].split()[0]) > 0
    recs = _records(tmp_path / "resnet-50-NHWC-B1-llvm.json")
    assert len(recs) == 28
    # every task is measured once in the warm-up round, the sparse one without error
    assert len({r["i"][0][0] for r in recs}) == 28
    sparse_recs = [r for r in recs if r["i"][0][0] == sparse_key]
    assert len(sparse_recs) == 1 and sparse_recs[0]["r"][1] == 0


@pytest.mark.slow
def test_tensor_expression_get_started(tmp_path) -> None:
    # run_cuda stays False as published (the GPU cells are tests/test_symbolic_shapes_tutorial.py's)
    proc = run_tutorial("tensor_expr_get_started", tmp_path)
    out = proc.stdout
    for name in ("naive", "parallel", "vector", "none", "blocking", "vectorization",
                 "loop permutation", "array packing", "block caching", "parallelization"):
        assert f"{name}: " in out, name
    assert "myadd.so" in out and "myadd.o" in out  # temp.listdir()
    assert "likely" in out  # the symbolic split's tail guard in the printed IR


def _mean_ms(out: str) -> float:
    line = next(x for x in out.splitlines() if x.startswith("Mean inference time (std dev):"))
    return float(line.split(":")[1].split("ms")[0])


def _network_matches_numpy(log: Path) -> None:
    """resnet-18 built for CUDA with the tutorial's log, run on the device (the emulator
    without a GPU), against templtune's numpy interpreter of the same network."""
    import numpy as np

    import templtune as tvm
    from templtune import auto_scheduler, relay
    from templtune.contrib import graph_executor
    from templtune.graph.reference import evaluate

    mod, params = relay.testing.resnet.get_workload(
        num_layers=18, batch_size=1, layout="NHWC", dtype="float32", image_shape=(224, 224, 3))
    data = np.random.default_rng(0).uniform(size=(1, 224, 224, 3)).astype("float32")
    with auto_scheduler.ApplyHistoryBest(str(log)):
        with tvm.transform.PassContext(opt_level=3,
                                       config={"relay.backend.use_auto_scheduler": True}):
            lib = relay.build(mod, target="cuda", params=params)
    module = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    module.set_input("data", data)
    module.run()
    got = module.get_output(0).numpy()
    ref = evaluate(mod["main"], params, data=data)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_seed_001_auto_scheduling_a_network_for_nvidia_gpu(tmp_path) -> None:
    # without a GPU every kernel (measurements, the built network) runs on the CUDA emulator
    from templtune.runtime.cuda.backend import device_exists

    proc = run_tutorial("tune_network_cuda", tmp_path, timeout=2400)
    out = proc.stdout
    keys = [x.split("workload key: ")[1].rsplit(")", 1)[0]
            for x in out.splitlines() if x.startswith("========== Task ")]
    assert len(keys) == 19  # resnet-18 NHWC's distinct subgraphs here
    assert "Latency (ms) | Speed (GFLOPS) | Trials |" in out
    log = tmp_path / "resnet-18-NHWC-B1-cuda.json"
    recs = _records(log)
    assert len(recs) == 20
    # the warm-up round measures every task once; every record is for a printed task
    assert {r["i"][0][0] for r in recs} == set(keys)
    assert all(r["i"][0][1].startswith("cuda") for r in recs)
    # checked against the naive schedule: a wrong answer (error 5) is a lowering bug
    assert not [r for r in recs if r["r"][1] == 5]
    ok = [r for r in recs if r["r"][1] == 0]
    assert len(ok) >= 15, [r["r"] for r in recs]
    if not device_exists():
        assert all(r.get("device") == "emulator" for r in ok)  # honest about its timings
    assert _mean_ms(out) > 0
    _network_matches_numpy(log)


@pytest.mark.slow
def test_tune_relay_x86_with_the_graph_tuner(tmp_path) -> None:
    proc = run_tutorial("tune_relay_x86", tmp_path, timeout=2400)
    out = proc.stdout
    assert out.count("Evaluate inference time cost...") == 3
    assert "Evaluation of the network been tuned on graph level:" in out
    assert (tmp_path / "resnet-18.log").stat().st_size > 0
    graph = _records(tmp_path / "resnet-18_graph_opt.log")
    assert graph and all(r["input"][0].startswith("llvm") for r in graph)
