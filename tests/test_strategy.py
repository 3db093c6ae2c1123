"""The op-strategy registry: templates declare the ops they implement; the network layer, task
extraction and the command line read the declarations (no template is imported by name)."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import templtune
from templtune import autotvm, graph
from templtune.autotvm import strategy
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.autotvm.task.task import TASK_TABLE
from templtune.cli.main import main
from templtune.graph import nn
from templtune.graph.autotvm_integration import op_call
from templtune.graph.op import get_op

ROOT = pathlib.Path(templtune.__file__).resolve().parent


def _calls() -> list[graph.Call]:
    """Anchor calls covering every x86 strategy's predicate (layouts, strides, groups)."""
    x = nn.var("x", (1, 16, 6, 6))
    xh = nn.var("xh", (1, 6, 6, 8))
    d = nn.var("d", (3, 20))
    return [
        nn.conv2d(x, nn.var("w", (16, 16, 3, 3)), padding=1),
        nn.conv2d(x, nn.var("w2", (8, 16, 3, 3)), strides=2, padding=(1, 0)),
        nn.conv2d(x, nn.var("dw", (16, 1, 3, 3)), padding=1, groups=16),
        nn.conv2d(xh, nn.var("wh", (3, 3, 8, 16)), padding=1, data_layout="NHWC"),
        nn.dense(d, nn.var("fc", (16, 20))),
    ]


def test_every_x86_implementation_computes_its_op_with_the_registered_transform() -> None:
    rng = np.random.default_rng(0)
    covered = set()
    for call in _calls():
        arrays = [rng.standard_normal(a.shape).astype(np.float32) for a in call.args]
        expected = get_op(call.op).reference(arrays, dict(call.attrs))
        impls = strategy.implementations(op_call(call), "llvm")
        assert impls, call.op
        for impl in impls:
            covered.add(impl.template)
            with autotvm.ApplyConfig(FallbackConfigEntity()):
                s, bufs = strategy.instantiate(impl, "llvm")
            mod = templtune.build(s, bufs, target="llvm")
            ins = list(arrays)
            if impl.transform is not None:
                ins[impl.weight] = impl.transform(ins[impl.weight])
            out = np.zeros(call.shape, np.float32)
            mod(*ins, out)
            np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3, err_msg=str(impl))
    # each cpu strategy of these ops took part
    assert covered >= {s.template for s in strategy.strategies(target="llvm")
                       if s.op in ("nn.conv2d", "nn.dense")}


def test_predicates_pick_by_layout_groups_stride_and_kernel() -> None:
    names = [sorted({i.template for i in strategy.implementations(op_call(c), "llvm")})
             for c in _calls()]
    assert names[0] == ["conv2d_nchw", "conv2d_nchw_wvec", "conv2d_winograd"]
    assert names[1] == ["conv2d_nchw", "conv2d_nchw_wvec"]  # stride 2: no Winograd
    assert names[2] == ["depthwise_conv2d_nchw"]
    assert names[3] == ["conv2d_nhwc"]
    assert names[4] == ["dense"]
    cuda = [sorted({i.template for i in strategy.implementations(op_call(c), "cuda")})
            for c in _calls()]
    assert cuda[0] == ["conv2d_nchw.cuda", "conv2d_nchw_winograd.cuda"]
    assert cuda[2] == ["depthwise_conv2d_nchw.cuda"] and cuda[4] == ["dense.cuda"]
    assert cuda[3] == ["conv2d_nhwc.cuda"]


def test_fallback_without_records_is_the_top_strategy_packed_by_its_config() -> None:
    call = op_call(_calls()[0])
    with autotvm.apply_history_best([]):
        impl = strategy.select(call, "llvm")
        plain = strategy.select(call, "llvm", allow_transform=False)
    assert impl is not None and impl.template == "conv2d_nchw" and impl.transform is not None
    cfg = strategy.current_config(strategy.Implementation("conv2d_nchw", impl.args[:9]), "llvm")
    assert impl.args[-1] == cfg["tile_oc"].size[-1]
    assert plain is not None and plain.transform is None and plain.template == "conv2d_nchw"


def test_extraction_for_cuda_uses_the_cuda_strategies() -> None:
    data = nn.var("data", (1, 8, 8, 8))
    w, fc = nn.var("w", (16, 8, 3, 3)), nn.var("fc", (10, 16 * 64))
    net = graph.Function((data, w, fc), nn.dense(nn.batch_flatten(
        nn.relu(nn.conv2d(data, w, padding=1))), fc))
    tasks = autotvm.task.extract_from_program(net, {}, "cuda")
    assert [t.name for t in tasks] == ["conv2d_nchw.cuda", "dense.cuda"]
    assert tasks[1].args == (1, 1024, 10) and len(tasks[0].config_space) > 1


def test_extraction_follows_what_build_runs_for_a_runtime_weight() -> None:
    # the dense weight is an input, not a parameter: build cannot pre-pack it
    data, w = nn.var("data", (2, 32)), nn.var("w", (16, 32))
    net = graph.Function((data, w), nn.dense(data, w))
    (task,) = autotvm.task.extract_from_program(net, {}, "llvm")
    assert task.args == (2, 16, 32)
    lib = graph.build(net, "llvm", {})
    assert lib.groups[0].impl == "autotvm:dense"
    x, wv = np.ones((2, 32), np.float32), np.full((16, 32), 0.5, np.float32)
    m = graph.GraphModule(lib)
    m.set_input("data", x)
    m.set_input("w", wv)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), x @ wv.T, rtol=1e-5)


def test_extract_from_program_takes_a_callable_program_too() -> None:
    def program() -> None:
        strategy.instantiate(strategy.Implementation("dense", (4, 16, 8)), "llvm")
        strategy.instantiate(strategy.Implementation("dense", (4, 16, 8)), "llvm")

    tasks = autotvm.task.extract_from_program(program, None, "llvm")
    assert [(t.name, t.args) for t in tasks] == [("dense", (4, 16, 8))]
    with pytest.raises(templtune.errors.TempltuneError, match="network or a callable"):
        autotvm.task.extract_from_program(42, None, "llvm")


def test_catalogue_comes_from_the_templates() -> None:
    entries = strategy.catalog_entries()
    assert {"x86", "cuda"} <= {e.family for e in entries.values()}
    for name in entries:
        assert name in TASK_TABLE, name
    assert set(strategy.catalog_entries("cuda")) >= {"conv2d_nchw.cuda", "dense.cuda"}


def test_cli_lists_cuda_templates(capsys) -> None:
    assert main(["templates", "--family", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "dense.cuda" in out and "--target cuda" in out and "conv2d_nchw " not in out


def test_registration_errors_name_the_problem() -> None:
    strategy.load_templates()
    with pytest.raises(strategy.StrategyError, match="already registered"):
        strategy.register("nn.dense", ("cpu",), "dense", workloads=lambda c: [])
    with pytest.raises(strategy.StrategyError, match="needs a workloads"):
        strategy.register("nn.dense", ("cpu",), "other")
    with pytest.raises(strategy.StrategyError, match="no strategy"):
        strategy.weight_transform("no_such_template", ())


def _imported_names(path: pathlib.Path) -> list[str]:
    """Every module a file imports, at any depth, plus string literals naming a module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module if node.level == 0 else "." * node.level + node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
    return out


@pytest.mark.parametrize("rel", ["autotvm/task/relay_integration.py",
                                 "auto_scheduler/relay_integration.py"])
def test_relay_integrations_do_not_import_the_network_layer(rel: str) -> None:
    assert not [n for n in _imported_names(ROOT / rel) if n.startswith("templtune.graph")]


def test_network_layer_and_cli_do_not_name_templates() -> None:
    files = sorted((ROOT / "graph").rglob("*.py")) + [ROOT / "cli" / "templates_cmd.py"]
    bad = [f"{p.relative_to(ROOT)}: {n}" for p in files for n in _imported_names(p)
           if "templtune.templates" in n or n.startswith(".templates")]
    assert not bad
