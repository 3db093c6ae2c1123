"""Whole networks on a CUDA target, run by the device graph runtime.

Without a GPU the CUDA modules run on the CPU emulator; the oracle is the numpy interpreter
of the same network (``graph.evaluate``), and nvcc (when installed) compiles every kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler, autotvm, graph, relay, transform
from templtune.codegen.cuda.compile import find_nvcc
from templtune.contrib import graph_executor
from templtune.graph import nn
from templtune.graph.ir import Function
from templtune.runtime.cuda.backend import get_backend
from templtune.runtime.cuda.module import CudaModule

HAVE_NVCC = find_nvcc() is not None


def _tiny_net(classes: int = 100) -> tuple[Function, dict[str, np.ndarray]]:
    """Every kind of group a CNN has: template convs, a depthwise conv, pooling, a residual
    add, concatenate, element-wise math, global pooling, flatten, dense and softmax."""
    rng = np.random.default_rng(0)
    params: dict[str, np.ndarray] = {}
    weights: list[graph.Var] = []

    def p(name: str, shape: tuple[int, ...]) -> graph.Var:
        params[name] = (rng.standard_normal(shape) * 0.3).astype("float32")
        weights.append(nn.var(name, shape))
        return weights[-1]

    x = nn.var("data", (1, 3, 12, 12))
    y = nn.relu(nn.bias_add(nn.conv2d(x, p("w0", (8, 3, 3, 3)), padding=(1, 1)), p("b0", (8,))))
    y = nn.max_pool2d(y, (3, 3), (2, 2), (1, 1))
    d = nn.conv2d(y, p("wd", (8, 1, 3, 3)), padding=(1, 1), groups=8)
    r = nn.relu(nn.add(nn.conv2d(d, p("w1", (8, 8, 1, 1))), y))
    c = nn.concatenate([r, nn.clip(y, 0.0, 0.5)], axis=1)
    c = nn.avg_pool2d(c, (2, 2), (1, 1))
    g = nn.batch_flatten(nn.global_avg_pool2d(c))
    out = nn.softmax(nn.bias_add(nn.dense(g, p("wf", (classes, 16))), p("bf", (classes,))))
    return Function((x, *weights), out), params


@pytest.fixture(scope="module")
def tiny() -> tuple[Function, dict[str, np.ndarray], np.ndarray]:
    net, params = _tiny_net()
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype("float32")
    return net, params, x


@pytest.fixture(scope="module")
def tiny_lib(tiny: tuple) -> graph.GraphExecutorFactoryModule:
    net, params, _ = tiny
    return relay.build(net, target="cuda", params=params)


def _count_copies(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    be = get_backend()
    counts = {"htod": 0, "dtoh": 0}
    for name in counts:
        orig = getattr(be, name)

        def counted(*a: object, _orig=orig, _name=name) -> None:
            counts[_name] += 1
            _orig(*a)
        monkeypatch.setattr(be, name, counted)
    return counts


def test_every_group_gets_a_gpu_implementation(tiny_lib) -> None:
    impls = {g.group.name: g.impl for g in tiny_lib.groups}
    assert impls["fused_nn_conv2d_nn_bias_add_nn_relu"] == "autotvm:conv2d_nchw.cuda"
    assert impls["fused_nn_dense_nn_bias_add"] == "autotvm:dense.cuda"
    assert impls["fused_nn_conv2d"] == "autotvm:depthwise_conv2d_nchw.cuda"
    assert "default" in impls.values()  # pooling, depthwise, concatenate, softmax, ...
    for g in tiny_lib.groups:
        for k in g.kernels:
            assert isinstance(k, CudaModule)
            assert all(s.block[0] > 1 or s.grid[0] > 1 for s in k.launches), k
            if HAVE_NVCC:
                assert k.binary, f"{g.group.name}: not compiled by nvcc"


def test_device_runtime_matches_numpy_without_host_round_trips(tiny, tiny_lib, monkeypatch
                                                                ) -> None:
    net, params, x = tiny
    dev = templtune.cuda(0)
    module = graph_executor.GraphModule(tiny_lib["default"](dev))
    counts = _count_copies(monkeypatch)
    module.set_input("data", templtune.nd.array(x))
    assert counts == {"htod": 1, "dtoh": 0}
    module.run()
    module.run()
    assert counts == {"htod": 1, "dtoh": 0}  # parameters and intermediates stay on the device
    out = module.get_output(0).numpy()
    assert counts["dtoh"] == 1
    np.testing.assert_allclose(out, graph.evaluate(net, params, data=x), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(module.get_input("data"), x)


def test_device_runtime_shares_intermediate_storage(tiny, tiny_lib) -> None:
    """Intermediates share device buffers as the host runtime's do: less storage than one
    buffer each, no call writing over a value a later call still reads, and the same output
    over repeated runs."""
    net, params, x = tiny
    rt = tiny_lib["default"](templtune.cuda(0))
    shared, separate = rt.storage_bytes
    assert 0 < shared < separate
    steps = [st for cg in tiny_lib.groups for st in cg.steps]
    out_ptr = {id(st.output): o.ptr for st, o in zip(steps, rt.step_outputs, strict=True)}
    assert len(set(out_ptr.values())) < len(out_ptr)
    last_read = {id(e): i for i, st in enumerate(steps) for e in st.inputs
                 if not isinstance(e, np.ndarray)}
    for i, st in enumerate(steps):
        live = [id(p.output) for p in steps[:i] if last_read.get(id(p.output), -1) >= i]
        assert all(out_ptr[v] != out_ptr[id(st.output)] for v in live), st
    rt.set_input("data", x)
    want = graph.evaluate(net, params, data=x)
    for _ in range(2):
        rt.run()
        np.testing.assert_allclose(rt.get_output(), want, rtol=1e-4, atol=1e-6)


def test_benchmark_and_profile_say_the_timings_are_emulated(tiny_lib) -> None:
    dev = templtune.cuda(0)
    module = graph_executor.GraphModule(tiny_lib["default"](dev))
    res = module.benchmark(dev, repeat=2, number=1)
    assert len(res.results) == 2 and all(t > 0 for t in res.results)
    if get_backend().name == "emulator":
        assert "emulator" in res.timing and "emulator" in str(res)
    prof = module.profile(number=1)
    assert [p[0] for p in prof] == [g.group.name for g in tiny_lib.groups]
    assert all(t > 0 for _, _, t in prof)
    ftimer = module.module.time_evaluator("run", dev, repeat=1, min_repeat_ms=1)
    assert ftimer().results[0] > 0


def test_default_gpu_schedules_of_imported_model_ops_match_numpy() -> None:
    """Padding, element-wise math, layout changes, slices, reductions, layer norm and
    batch_matmul: the ops ONNX models bring, on the default GPU schedule."""
    from templtune.graph.op import make_call

    rng = np.random.default_rng(3)
    x = nn.var("data", (1, 4, 6, 6))
    gamma, beta = nn.var("gamma", (4,)), nn.var("beta", (4,))
    params = {"gamma": rng.uniform(0.5, 1.5, 4).astype("float32"),
              "beta": rng.standard_normal(4).astype("float32")}
    p = make_call("nn.pad", [x], pad_before=(0, 0, 1, 1), pad_after=(0, 0, 1, 1),
                  pad_value=0.5)
    t = make_call("transpose", [make_call("sigmoid", [p])], axes=(0, 2, 3, 1))
    r = make_call("reshape", [t], newshape=(1, 64, 4))
    sl = make_call("strided_slice", [r], begin=(0, 0, 0), end=(1, 64, 4), strides=(1, 2, 1))
    ln = make_call("nn.layer_norm", [sl, gamma, beta], axis=2, epsilon=1e-5)
    m = make_call("mean", [ln], axis=(1,), keepdims=False)
    bm = make_call("max", [nn.batch_matmul(ln, sl)], axis=(2,), keepdims=False)
    gm = nn.batch_flatten(make_call("nn.global_max_pool2d", [p]))
    out = nn.concatenate([nn.add(m, gm), bm], axis=1)
    net = Function((x, gamma, beta), out)
    lib = relay.build(net, target="cuda", params=params)
    assert all(g.impl == "default" for g in lib.groups)
    data = rng.standard_normal((1, 4, 6, 6)).astype("float32")
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("data", data)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(),
                               graph.evaluate(net, params, data=data), rtol=1e-4, atol=1e-5)


def test_depthwise_template_configs_match_numpy() -> None:
    from templtune.autotvm.dispatcher import ApplyConfig
    from templtune.topi.testing import depthwise_conv2d_python_nchw

    autotvm.strategy.load_templates()
    args = (1, 9, 9, 16, 3, 3, 2, 1)
    task = autotvm.task.create("depthwise_conv2d_nchw.cuda", args, "cuda")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 16, 9, 9)).astype("float32")
    k = rng.standard_normal((16, 1, 3, 3)).astype("float32")
    ref = depthwise_conv2d_python_nchw(a, k, 2, 1)
    for i in rng.choice(len(task.config_space), 2, replace=False):
        cfg = task.config_space.get(int(i))
        with templtune.target.Target("cuda"), ApplyConfig(cfg):
            s, tensors = task.func(*args)
            f = templtune.build(s, tensors, "cuda")
        threads = int(np.prod(f.launches[0].block))
        assert threads == cfg["tile_c"].size[1] * cfg["tile_y"].size[1] * cfg["tile_x"].size[1]
        out = np.zeros(ref.shape, "float32")
        f(a, k, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_a_cuda_network_refuses_a_cpu_device(tiny_lib) -> None:
    with pytest.raises(graph.GraphError, match="runs on a cuda device"):
        tiny_lib["default"](templtune.cpu())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet-18", "mobilenet"])
def test_zoo_network_on_cuda_matches_numpy(name: str) -> None:
    net, params, ishape, _ = graph.testing.get_network(name, image_shape=(3, 32, 32))
    lib = relay.build(net, target="cuda", params=params)
    assert any(g.impl.startswith("autotvm:") for g in lib.groups)
    if HAVE_NVCC:
        assert all(k.binary for g in lib.groups for k in g.kernels)
    x = np.random.default_rng(0).standard_normal(ishape).astype("float32")
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("data", x)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(net, params, data=x),
                               rtol=1e-3, atol=1e-5)


@pytest.mark.slow
def test_seed_001_flow_with_a_tiny_budget(tmp_path, monkeypatch) -> None:
    """Seed 001's calls, on a network small enough to tune in a test."""
    monkeypatch.chdir(tmp_path)  # the scheduler's default callbacks write total_latency.tsv
    target = templtune.target.Target("cuda")
    mod, params = _tiny_net(classes=10)
    tasks, task_weights = auto_scheduler.extract_tasks(mod["main"], params, target)
    assert tasks and all(t.target.kind.name == "cuda" for t in tasks)
    log_file = str(tmp_path / "tiny-cuda.json")
    tuner = auto_scheduler.TaskScheduler(tasks, task_weights, seed=0)
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=len(tasks), num_measures_per_round=1,
        runner=auto_scheduler.LocalRunner(repeat=1, min_repeat_ms=0, timeout=60),
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)], verbose=0)
    tuner.tune(tune_option, search_policy="sketch.random")
    with auto_scheduler.ApplyHistoryBest(log_file):
        with transform.PassContext(opt_level=3,
                                   config={"relay.backend.use_auto_scheduler": True}):
            lib = relay.build(mod, target=target, params=params)
    assert lib.num_tuned >= 1
    assert any(g.impl == "auto_scheduler" for g in lib.groups)
    dev = templtune.cuda(0)
    module = graph_executor.GraphModule(lib["default"](dev))
    x = np.random.default_rng(2).uniform(size=(1, 3, 12, 12)).astype("float32")
    module.set_input("data", templtune.nd.array(x))
    res = module.benchmark(dev, repeat=3, min_repeat_ms=1)
    assert len(res.results) == 3
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(mod, params, data=x),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_autotvm_network_flow_for_cuda(tmp_path, tiny) -> None:
    net, params, x = tiny
    tasks = autotvm.task.extract_from_program(net, params, "cuda")
    names = sorted(t.name for t in tasks)
    assert names == ["conv2d_nchw.cuda", "conv2d_nchw.cuda", "dense.cuda",
                     "depthwise_conv2d_nchw.cuda"]
    task = next(t for t in tasks if t.name == "dense.cuda")
    log = str(tmp_path / "dense.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=1, repeat=1, timeout=60))
    tuner = autotvm.tuner.RandomTuner(task, seed=0)
    tuner.tune(n_trial=2, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        lib = relay.build(net, target="cuda", params=params)
    dense = next(g for g in lib.groups if g.group.name == "fused_nn_dense_nn_bias_add")
    assert dense.impl == "autotvm:dense.cuda" and dense.tuned
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("data", x)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), graph.evaluate(net, params, data=x),
                               rtol=1e-4, atol=1e-6)


def test_cli_tune_network_rejects_a_bad_target(capsys) -> None:
    from templtune.cli.main import main

    assert main(["tune-network", "resnet-18", "--target", "cudaa"]) != 0
    assert "--target 'cudaa'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("method", ["auto_scheduler", "autotvm"])
def test_cli_tune_network_for_cuda(capsys, tmp_path, method: str) -> None:
    from templtune.cli.main import main

    rc = main(["tune-network", "resnet-18", "--image-shape", "3,32,32", "--target", "cuda",
               "--method", method, "--log", str(tmp_path / "none.log"), "--timing-repeat", "1",
               "--timing-ms", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "check: the compiled network matches numpy" in out
    assert "Mean inference time (std dev):" in out
    if get_backend().name == "emulator":
        assert "[CPU timings of the CUDA emulator]" in out
    if method == "autotvm":
        assert "AutoTVM tasks" in out and "conv2d_nchw.cuda" in out
