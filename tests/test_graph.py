"""Whole networks: IR, fusion, task extraction, build (default and tuned schedules), executor.

The oracle is the numpy interpreter of the same network (``graph.evaluate``), itself built on
topi's numpy references; small image sizes keep compilation short.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler, graph
from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
from templtune.graph import nn


def _run(lib: graph.GraphExecutorFactoryModule, x: np.ndarray) -> np.ndarray:
    m = graph.GraphModule(lib["default"](templtune.cpu()))
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy()


def _record(path, task, pick=lambda states: states[0], n: int = 4) -> str:
    """Write one (fake-cost) record of a sampled state of ``task``; returns the log path."""
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(seed=0), verbose=0)
    state = pick(policy.sample_initial_population(n))
    log = str(path)
    auto_scheduler.save_records(log, [MeasureInput(task, state)],
                                [MeasureResult((1e-4,), 0, "", 1.0, time.time())])
    return log


@pytest.fixture(scope="module")
def resnet18_small() -> tuple:
    net, params, ishape, _ = graph.testing.get_network("resnet-18", image_shape=(3, 32, 32))
    x = np.random.default_rng(0).standard_normal(ishape).astype("float32")
    return net, params, x


def test_shapes_and_printing(resnet18_small: tuple) -> None:
    net, params, _ = resnet18_small
    assert net.body.shape == (1, 1000)
    assert net["main"] is net
    text = str(net)
    assert text.startswith("fn (%data: Tensor[(1, 3, 32, 32), float32]")
    assert "nn.conv2d(%data, %conv0_weight, data_layout=NCHW, groups=1, padding=(3, 3, 3, 3)" \
        in text
    n_conv = sum(c.op == "nn.conv2d" for c in net.calls())
    assert n_conv == 1 + 16 + 3  # stem, 8 basic blocks x 2, 3 downsampling shortcuts
    assert {k for k in params} == {v.name for v in net.params[1:]}


def test_fusion_groups(resnet18_small: tuple) -> None:
    net, _, _ = resnet18_small
    groups = graph.partition(net)
    names = [g.name for g in groups]
    assert names[0] == "fused_nn_conv2d_nn_bias_add_nn_relu"
    assert names.count("fused_nn_conv2d_nn_bias_add_add_nn_relu") == 8  # every block's residual
    assert names.count("fused_nn_conv2d_nn_bias_add") == 3              # shortcuts
    assert names[-3:] == ["fused_nn_global_avg_pool2d_nn_batch_flatten",
                          "fused_nn_dense_nn_bias_add", "fused_nn_softmax"]
    produced: set[int] = {id(v) for v in net.params}
    for g in groups:  # execution order: every input exists before its group runs
        assert all(id(e) in produced for e in g.inputs)
        produced.add(id(g.output))


def test_extract_tasks_weights_and_keys(resnet18_small: tuple) -> None:
    net, params, _ = resnet18_small
    tasks, weights = auto_scheduler.extract_tasks(net["main"], params, "llvm")
    groups = graph.partition(net)
    assert sum(weights) == sum(not g.is_simple for g in groups)
    assert len({t.workload_key for t in tasks}) == len(tasks)
    assert max(weights) == 2  # the repeated basic blocks of each stage share their kernels
    assert tasks[0].desc == "fused_nn_conv2d_nn_bias_add_nn_relu"
    assert "p0 = PLACEHOLDER [1, 3, 32, 32]" in str(tasks[0].compute_dag)
    simple, _ = auto_scheduler.extract_tasks(net, params, "llvm", include_simple_tasks=True)
    assert len(simple) >= len(tasks)


def test_default_build_matches_numpy(resnet18_small: tuple) -> None:
    net, params, x = resnet18_small
    lib = graph.build(net, target="llvm", params=params)
    impls = {cg.group.calls[0].op: cg.impl for cg in lib.groups}
    assert impls["nn.conv2d"].startswith("autotvm:conv2d_")  # the x86 templates, untuned
    assert impls["nn.max_pool2d"] == "default"
    assert lib.num_tuned == sum(cg.impl.startswith("autotvm") and cg.tuned for cg in lib.groups)
    out = _run(lib, x)
    ref = graph.evaluate(net, params, data=x)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
    assert abs(out.sum() - 1.0) < 1e-4


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_mobilenet_layouts_match_numpy(layout: str) -> None:
    shape = (3, 32, 32) if layout == "NCHW" else (32, 32, 3)
    net, params = graph.testing.mobilenet.get_workload(image_shape=shape, layout=layout,
                                                       alpha=0.25, num_classes=10)
    x = np.random.default_rng(1).standard_normal(net.params[0].shape).astype("float32")
    lib = graph.build(net, "llvm", params)
    impl = "autotvm:conv2d_nchw" if layout == "NCHW" else "autotvm:conv2d_nhwc"
    assert lib.groups[0].impl == impl
    out = _run(lib, x)
    np.testing.assert_allclose(out, graph.evaluate(net, params, data=x), rtol=1e-4, atol=1e-6)


def test_tuned_record_is_applied(tmp_path, resnet18_small: tuple) -> None:
    net, params, x = resnet18_small
    tasks, _ = auto_scheduler.extract_tasks(net, params, "llvm")
    task = tasks[1]
    log = _record(tmp_path / "net.json", task)
    with auto_scheduler.ApplyHistoryBest(log):
        lib = graph.build(net, "llvm", params)
    tuned = [g for g in lib.groups if g.impl == "auto_scheduler"]
    assert tuned and all(g.workload_key == task.workload_key and g.tuned for g in tuned)
    np.testing.assert_allclose(_run(lib, x), graph.evaluate(net, params, data=x),
                               rtol=1e-4, atol=1e-6)


def test_executor_api(resnet18_small: tuple) -> None:
    net, params, x = resnet18_small
    m = graph.GraphModule(graph.build(net, "llvm", params))
    m.set_input(data=x)
    m.run()
    out = m.get_output(0).numpy()
    res = m.benchmark(repeat=2, number=1)
    assert len(res.results) == 2 and res.mean > 0 and "mean (ms)" in str(res)
    prof = m.module.time_evaluator("run", templtune.cpu(), repeat=2, min_repeat_ms=5)()
    assert len(prof.results) == 2 and all(r > 0 for r in prof.results)
    np.testing.assert_array_equal(m.get_output(0).numpy(), out)
    with pytest.raises(graph.GraphError, match="no input 'image'"):
        m.set_input("image", x)
    with pytest.raises(graph.GraphError, match="expected"):
        m.set_input("data", x[:, :2])


def test_bad_networks_name_the_problem() -> None:
    data = nn.var("data", (1, 3, 8, 8))
    with pytest.raises(graph.GraphError, match="nn.conv2d"):
        nn.conv2d(data, nn.var("w", (4, 5, 3, 3)))
    with pytest.raises(graph.GraphError, match="shapes differ"):
        nn.add(data, nn.var("y", (1, 3, 4, 4)))
    with pytest.raises(graph.GraphError, match="needs a shape"):
        nn.var("z")
    with pytest.raises(graph.GraphError, match="unknown network"):
        graph.testing.get_network("alexnet")
    net = nn.relu(data)
    with pytest.raises(graph.GraphError, match="not an input"):
        graph.build(graph.Function((data,), net), "llvm", {"w": np.zeros(3)})


def test_pass_context_controls_fusion_and_records(tmp_path) -> None:
    from templtune import transform

    net, params = graph.testing.mobilenet.get_workload(image_shape=(3, 16, 16), alpha=0.25,
                                                       num_classes=10)
    n_ops = len(net.calls())
    with transform.PassContext(opt_level=0):
        assert len(graph.partition(net, transform.PassContext.current().fuse)) == n_ops
        tasks0, _ = auto_scheduler.extract_tasks(net, params, "llvm", include_simple_tasks=True)
    fused = graph.partition(net)
    assert len(fused) < n_ops
    assert max(len(g.calls) for g in graph.partition(net, max_depth=2)) == 2
    with transform.PassContext(config={"relay.FuseOps.max_depth": 2}):
        x = np.random.default_rng(2).standard_normal(net.params[0].shape).astype("float32")
        out = _run(graph.build(net, "llvm", params), x)
    np.testing.assert_allclose(out, graph.evaluate(net, params, data=x), rtol=1e-4, atol=1e-6)
    assert len(tasks0) > len(auto_scheduler.extract_tasks(net, params, "llvm",
                                                          include_simple_tasks=True)[0])
    with pytest.raises(graph.GraphError, match="unknown PassContext config 'relay.bogus'"):
        transform.PassContext(config={"relay.bogus": 1})


def test_use_auto_scheduler_false_ignores_records(tmp_path, resnet18_small: tuple) -> None:
    from templtune import transform

    net, params, _ = resnet18_small
    tasks, _ = auto_scheduler.extract_tasks(net, params, "llvm")
    log = _record(tmp_path / "one.json", tasks[-1], n=2)

    def n_auto(lib: graph.GraphExecutorFactoryModule) -> int:
        return sum(cg.impl == "auto_scheduler" for cg in lib.groups)

    with auto_scheduler.ApplyHistoryBest(log):
        assert n_auto(graph.build(net, "llvm", params)) == 1
        cfg = {"relay.backend.use_auto_scheduler": False}
        with transform.PassContext(opt_level=3, config=cfg):
            assert n_auto(graph.build(net, "llvm", params)) == 0


def test_auto_scheduler_record_with_pretransformed_weights(tmp_path,
                                                           resnet18_small: tuple) -> None:
    """A conv state that re-lays its weight: relay.build pre-transforms the weight once
    (REWRITE_FOR_PRE_TRANSFORMED) and the network still matches numpy."""
    from templtune.auto_scheduler.layout_rewrite import rewritten_layouts
    from templtune.auto_scheduler.replay import replay_schedule

    net, params, x = resnet18_small
    tasks, _ = auto_scheduler.extract_tasks(net, params, "llvm")
    task = next(t for t in tasks if t.desc == "fused_nn_conv2d_nn_bias_add_add_nn_relu")
    dag = task.compute_dag
    log = _record(tmp_path / "relaid.json", task, n=16, pick=lambda states: next(
        s for s in states if rewritten_layouts(dag, replay_schedule(dag, s)[0])))
    with auto_scheduler.ApplyHistoryBest(log):
        lib = graph.build(net, "llvm", params)
    groups = [g for g in lib.groups if g.impl == "auto_scheduler"]
    assert groups
    for g in groups:
        consts = [a for a in g.steps[0].inputs if isinstance(a, np.ndarray)]
        assert len(consts) == 1 and consts[0].ndim > 4  # the weight, re-laid into its tiles
    np.testing.assert_allclose(_run(lib, x), graph.evaluate(net, params, data=x),
                               rtol=1e-4, atol=1e-6)
