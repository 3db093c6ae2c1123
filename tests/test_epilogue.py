"""Fused epilogues: every template that takes one computes, for random configs of its space and
every epilogue kind (bias, bias+relu, bias+add+relu, clip, batch-norm scale+shift), what numpy
computes; the epilogue leaves the workload key alone; the fused kernel is one kernel."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm, graph, transform
from templtune.autotvm import strategy
from templtune.autotvm.epilogue import Epilogue, EpilogueError, EpilogueInput, attach
from templtune.autotvm.strategy import StrategyError
from templtune.autotvm.task.task import create
from templtune.graph import nn
from templtune.graph.autotvm_integration import candidates, fused_tail
from templtune.graph.fuse import partition
from templtune.graph.ops.elemwise import binary, unary
from templtune.target import Target

KINDS = ("bias", "bias_relu", "bias_add_relu", "clip", "scale_shift", "bias_silu")



def _first_valid(space):
    """The first config the space's filters keep (index 0 may be filtered: register blocks)."""
    index = 0 if space.is_index_valid(0) else space.get_next_index(0)
    return space.get(index)

def _anchors() -> dict[str, tuple[graph.Call, int]]:
    """Anchor calls (and their channel axis) covering the epilogue-taking x86 strategies."""
    x = nn.var("x", (1, 16, 8, 8))
    return {
        "conv3x3": (nn.conv2d(x, nn.var("w", (32, 16, 3, 3)), padding=1), 1),
        "conv_s2": (nn.conv2d(x, nn.var("w", (16, 16, 3, 3)), strides=2, padding=1), 1),
        "conv1x1": (nn.conv2d(x, nn.var("w", (32, 16, 1, 1))), 1),
        "depthwise": (nn.conv2d(x, nn.var("w", (16, 1, 3, 3)), padding=1, groups=16), 1),
        "conv_nhwc": (nn.conv2d(nn.var("x", (1, 8, 8, 16)), nn.var("w", (3, 3, 16, 24)),
                                padding=1, data_layout="NHWC"), 3),
        "dense_b1": (nn.dense(nn.var("x", (1, 64)), nn.var("w", (48, 64))), 1),
        "dense_b8": (nn.dense(nn.var("x", (8, 40)), nn.var("w", (32, 40))), 1),
        # 197 rows, prime: the fallback's row blocks end in a partial one
        "dense_b197": (nn.dense(nn.var("x", (197, 40)), nn.var("w", (32, 40))), 1),
    }


def _with_tail(anchor: graph.Call, axis: int, kind: str) -> graph.Function:
    c = anchor.shape[axis]
    b = nn.var("bias", (c,))
    if kind == "clip":
        y = nn.clip(anchor, -0.5, 0.5)
    elif kind == "scale_shift":  # a batch norm as its scale and shift
        scale = nn.var("scale", (c,) + (1,) * (len(anchor.shape) - axis - 1))
        y = nn.bias_add(binary("multiply", anchor, scale), b, axis=axis)
    elif kind == "bias_silu":  # a vector-math tail (EfficientNet): computed vectorized too
        y = nn.bias_add(anchor, b, axis=axis)
        y = binary("multiply", y, unary("sigmoid", y))
    else:
        y = nn.bias_add(anchor, b, axis=axis)
        if kind == "bias_add_relu":
            y = nn.add(y, nn.var("res", anchor.shape))
        if kind != "bias":
            y = nn.relu(y)
    return graph.Function(tuple(_vars(y)), y)


def _vars(e: Any) -> list[graph.Var]:
    seen: list[graph.Var] = []

    def walk(x: Any) -> None:
        if isinstance(x, graph.Var):
            if all(x is not s for s in seen):
                seen.append(x)
        else:
            for a in x.args:
                walk(a)

    walk(e)
    return seen


def tail_in_output_stage(s: Any, anchor_op: Any) -> bool:
    """Whether schedule ``s`` computes the tail after ``anchor_op`` in its output stage: every
    stage between the two is inlined, and the anchor is inlined or computed inside the output
    stage's loops (no stage writes a whole intermediate of the tail)."""
    (out,) = s.outputs
    between: dict[int, Any] = {}
    anchor = s[anchor_op]  # NOTE: by stage: a rewrite (layout, cache) may replace the op

    def reaches(op: Any) -> bool:
        if s[op] is anchor:
            return True
        hit = any([reaches(t.op) for t in op.input_tensors])
        if hit and op is not out:
            between[id(op)] = op
        return hit

    if not reaches(out):
        return False
    return (all(s[op].attach_type == "inline" for op in between.values())
            and anchor.attach_type in ("inline", "scope"))


def _recording(ep: Epilogue, seen: list[Any]) -> Epilogue:
    def build(out: Any, ins: Any) -> Any:
        seen.append(out.op)
        return ep.build(out, ins)
    return dataclasses.replace(ep, build=build)


def _cases() -> list[tuple[str, str]]:
    """(anchor, template) of every epilogue-taking template applicable to an anchor."""
    out = []
    for name, (call, _) in _anchors().items():
        for t in dict.fromkeys(i.template for i in candidates(call) if i.epilogue):
            out.append((name, t))
    return out


CASES = _cases()


def test_epilogue_templates_cover_conv_and_dense() -> None:
    assert {t for _, t in CASES} == {s.template for s in strategy.strategies(target="llvm")
                                     if s.op in ("nn.conv2d", "nn.dense")}


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES, ids=[f"{a}-{t}" for a, t in CASES])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fused_epilogue_matches_numpy_for_random_configs(case: tuple[str, str], kind: str,
                                                         data: st.DataObject) -> None:
    name, template = case
    anchor, axis = _anchors()[name]
    net = _with_tail(anchor, axis, kind)
    (group,) = partition(net)
    ft = fused_tail(group)
    assert ft is not None and ft.n_calls == len(group.calls) and ft.output is net.body
    impl = data.draw(st.sampled_from([i for i in candidates(anchor) if i.template == template]),
                     label="implementation")
    space = create(impl.template, impl.args, "llvm").config_space
    idx = data.draw(st.integers(0, len(space) - 1), label="config")
    if not space.is_index_valid(idx):
        idx = space.get_next_index(idx)
        assert idx is not None
    anchor_ops: list[Any] = []
    with autotvm.ApplyConfig(space.get(idx)):
        s, bufs = strategy.instantiate(impl, "llvm", _recording(ft.epilogue, anchor_ops))
    assert tail_in_output_stage(s, anchor_ops[0])
    mod = templtune.build(s, bufs, target="llvm")
    rng = np.random.default_rng(idx)
    values = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in net.params}
    ins = [values[a.name] for a in anchor.args]
    if impl.transform is not None:
        ins[impl.weight] = impl.transform(ins[impl.weight])
    ins += [values[e.name] for e in ft.inputs]
    out = np.zeros(net.body.shape, np.float32)
    mod(*ins, out)
    want = graph.evaluate(net, values)
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3, err_msg=f"{impl} {kind} {idx}")


def test_epilogue_keeps_the_workload_key_and_is_one_kernel() -> None:
    anchor, axis = _anchors()["dense_b8"]
    net = _with_tail(anchor, axis, "bias_add_relu")
    ft = fused_tail(partition(net)[0])
    assert ft is not None
    impl = candidates(anchor)[-1]
    with autotvm.ApplyConfig(_first_valid(create(impl.template, impl.args, "llvm").config_space)) \
            as ctx:
        s, bufs = strategy.instantiate(impl, "llvm", ft.epilogue)
    assert ctx.workload == impl.workload == ("dense", 8, 32, 40)
    # data, weight, bias, residual, fused output: one kernel writes only the fused output
    assert [tuple(int(d) for d in b.shape) for b in bufs] == [(8, 40), (32, 40), (32,),
                                                               (8, 32), (8, 32)]
    assert len(s.outputs) == 1


def test_a_template_without_epilogue_support_refuses_one() -> None:
    impl = strategy.Implementation("conv2d_nchw_wvec_never_registered", (1,))
    ep = Epilogue((), lambda out, ins: out, "id", ("identity",))
    with pytest.raises(StrategyError, match="takes no fused epilogue"):
        strategy.instantiate(impl, "llvm", ep)


def test_an_epilogue_of_another_shape_is_refused() -> None:
    from templtune import te

    out = te.placeholder((4, 8), name="out")
    ep = Epilogue((EpilogueInput((8,)),),
                  lambda o, ins: te.compute((8,), lambda j: o[0, j] + ins[0][j]), "row", ("row",))
    with pytest.raises(EpilogueError, match=r"gives \(8,\)"):
        attach(out, ep)


def test_a_tail_that_moves_elements_stays_a_second_kernel() -> None:
    x = nn.var("x", (2, 16, 4, 4))
    y = nn.batch_flatten(nn.relu(nn.conv2d(x, nn.var("w", (8, 16, 1, 1)))))
    (group,) = partition(graph.Function(tuple(_vars(y)), y))
    ft = fused_tail(group)
    assert ft is not None and ft.n_calls == 2 and ft.epilogue.ops == ("nn.relu",)


# ---- networks ----------------------------------------------------------------------------------
def _run(lib: graph.GraphExecutorFactoryModule, x: np.ndarray) -> np.ndarray:
    m = graph.GraphModule(lib)
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy()


def _build(net: graph.Function, params: dict[str, np.ndarray], fuse: bool
           ) -> graph.GraphExecutorFactoryModule:
    with transform.PassContext(config={"templtune.graph.fuse_epilogues": fuse}):
        return graph.build(net, "llvm", params)


def _kernels(lib: graph.GraphExecutorFactoryModule) -> int:
    return sum(len(g.steps) for g in lib.groups)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet-18", "mobilenet"])
def test_networks_run_one_kernel_per_group_and_match_numpy(name: str) -> None:
    net, params, ishape, _ = graph.testing.get_network(name, image_shape=(3, 32, 32))
    x = np.random.default_rng(0).standard_normal(ishape).astype(np.float32)
    want = graph.evaluate(net, params, data=x)
    fused, split = _build(net, params, True), _build(net, params, False)
    n_tails = sum(len(g.group.calls) > 1 and g.impl.startswith("autotvm:") for g in split.groups)
    assert n_tails >= 10  # every conv with a bias / add / relu tail, and the classifier
    assert _kernels(fused) == len(fused.groups) == _kernels(split) - n_tails
    assert [g.impl for g in fused.groups] == [g.impl for g in split.groups]
    for lib in (fused, split):
        np.testing.assert_allclose(_run(lib, x), want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_packaged_logs_still_apply_to_fused_groups() -> None:
    """The seed layer with a residual block's tail and ResNet's classifier with its bias:
    both workloads are in the packaged reference log, with and without the epilogue."""
    data = nn.var("data", (1, 512, 7, 7))
    w, b, fc, fb = (nn.var("w", (512, 512, 3, 3)), nn.var("b", (512,)),
                    nn.var("fc", (1000, 512)), nn.var("fb", (1000,)))
    y = nn.relu(nn.add(nn.bias_add(nn.conv2d(data, w, padding=1), b), data))
    y = nn.bias_add(nn.dense(nn.batch_flatten(nn.global_avg_pool2d(y)), fc), fb, axis=1)
    net = graph.Function((data, w, b, fc, fb), y)
    rng = np.random.default_rng(5)
    params = {"w": rng.standard_normal((512, 512, 3, 3)).astype(np.float32) * 0.02,
              "b": rng.standard_normal(512).astype(np.float32),
              "fc": rng.standard_normal((1000, 512)).astype(np.float32) * 0.05,
              "fb": rng.standard_normal(1000).astype(np.float32)}
    x = rng.standard_normal((1, 512, 7, 7)).astype(np.float32)
    fused, split = _build(net, params, True), _build(net, params, False)
    for lib, steps in ((fused, 1), (split, 2)):
        anchors = [g for g in lib.groups if g.impl.startswith("autotvm:")]
        assert len(anchors) == 2
        assert all(g.tuned and len(g.steps) == steps for g in anchors), lib.groups
    assert [g.impl for g in fused.groups] == [g.impl for g in split.groups]
    np.testing.assert_allclose(_run(fused, x), graph.evaluate(net, params, data=x),
                               rtol=1e-3, atol=1e-3)


def _conv_stage(sch: Any) -> Any:
    return next(st.op for st in sch.stages if st.op.name == "conv2d_nchw")


@pytest.mark.slow
def test_auto_scheduler_record_runs_its_group_as_one_fused_kernel(tmp_path) -> None:
    """On CPU the sketch policy offers the conv tiled with its tail fused and (as TVM's) tiled
    alone; the record of a fused state builds as one kernel whose output stage computes the
    tail, the conv at its tiles."""
    from templtune import auto_scheduler
    from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
    from templtune.auto_scheduler.replay import replay_schedule
    from templtune.graph.build import _auto_scheduled

    net, params, ishape, _ = graph.testing.get_network("resnet-18", image_shape=(3, 32, 32))
    tasks, _ = auto_scheduler.extract_tasks(net, params, "llvm")
    task = next(t for t in tasks if t.desc == "fused_nn_conv2d_nn_bias_add_add_nn_relu")
    policy = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(seed=0), verbose=0)
    dag = task.compute_dag
    state = next(st for st in policy.sample_initial_population(16)
                 if tail_in_output_stage(sch := replay_schedule(dag, st)[0], _conv_stage(sch)))
    log = str(tmp_path / "one.json")
    auto_scheduler.save_records(log, [MeasureInput(task, state)],
                                [MeasureResult((1e-4,), 0, "", 1.0, time.time())])
    x = np.random.default_rng(0).standard_normal(ishape).astype(np.float32)
    with auto_scheduler.ApplyHistoryBest(log):
        lib = graph.build(net, "llvm", params)
        groups = [g for g in lib.groups if g.impl == "auto_scheduler"]
        assert groups and all(len(g.steps) == 1 and g.steps[0].output is g.group.output
                              for g in groups)
        sch, _, _, _ = _auto_scheduled(groups[0].group, Target("llvm"), True, set())
    assert tail_in_output_stage(sch, _conv_stage(sch))
    np.testing.assert_allclose(_run(lib, x), graph.evaluate(net, params, data=x),
                               rtol=1e-4, atol=1e-5)


def _conv_relu_flatten() -> tuple[graph.Function, dict[str, np.ndarray], np.ndarray]:
    x = nn.var("data", (1, 16, 6, 6))
    w, b = nn.var("w", (16, 16, 3, 3)), nn.var("b", (16,))
    y = nn.batch_flatten(nn.relu(nn.bias_add(nn.conv2d(x, w, padding=1), b)))
    rng = np.random.default_rng(7)
    params = {"w": rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2,
              "b": rng.standard_normal(16).astype(np.float32)}
    return (graph.Function((x, w, b), y), params,
            rng.standard_normal((1, 16, 6, 6)).astype(np.float32))


def test_what_follows_the_fused_tail_runs_as_a_second_kernel() -> None:
    net, params, x = _conv_relu_flatten()
    (cg,) = _build(net, params, True).groups
    assert [s.output.op for s in cg.steps] == ["nn.relu", "nn.batch_flatten"]
    np.testing.assert_allclose(_run(_build(net, params, True), x),
                               graph.evaluate(net, params, data=x), rtol=1e-4, atol=1e-5)


def test_a_template_failing_with_its_epilogue_runs_without_it(monkeypatch, caplog) -> None:
    import importlib

    from templtune.errors import TempltuneError

    build_mod = importlib.import_module("templtune.graph.build")  # the module, not graph.build

    real = build_mod.instantiate

    def refuse(cand: Any, target: Any, epilogue: Any = None) -> Any:
        if epilogue is not None:
            raise TempltuneError("no room for the epilogue")
        return real(cand, target)

    monkeypatch.setattr(build_mod, "instantiate", refuse)
    net, params, x = _conv_relu_flatten()
    lib = _build(net, params, True)
    (cg,) = lib.groups
    assert cg.impl == "autotvm:conv2d_nchw" and len(cg.steps) == 2
    assert "with epilogue nn_bias_add_nn_relu" in caplog.text
    np.testing.assert_allclose(_run(lib, x), graph.evaluate(net, params, data=x),
                               rtol=1e-4, atol=1e-5)


def test_the_decorated_template_takes_the_epilogue_keyword_only() -> None:
    from templtune.templates.x86.dense import dense

    anchor, axis = _anchors()["dense_b8"]
    ft = fused_tail(partition(_with_tail(anchor, axis, "clip"))[0])
    assert ft is not None
    with autotvm.ApplyConfig(_first_valid(create("dense", (8, 32, 40), "llvm").config_space)) as ctx:
        _, bufs = dense(8, 32, 40, epilogue=ft.epilogue)
        with pytest.raises(TypeError, match="keyword epilogue"):
            dense(8, 32, 40, tail=ft.epilogue)
    assert ctx.workload == ("dense", 8, 32, 40) and bufs[-1].op.name == "T_clip"
