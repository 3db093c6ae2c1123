"""``nn.batch_matmul``'s ``transpose_a`` / ``transpose_b`` flags: the topi compute, the network
op, networks built on the x86 template and on the CUDA default schedule against numpy, and
``SimplifyExpr`` folding a transpose of the last two axes into a flag (the template's configs
under each flag pair: ``test_templates_x86_batch_matmul.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm, graph, relay, te, topi, transform
from templtune.autotvm import strategy
from templtune.errors import ExprError
from templtune.graph import nn
from templtune.graph.ir import Call, Expr, Function
from templtune.graph.op import make_call
from templtune.graph.ops.elemwise import binary
from templtune.graph.simplify import simplify_reshapes
from templtune.topi import testing as ref

strategy.load_templates()
FLAGS = [(False, True), (False, False), (True, True), (True, False)]
FLAG_IDS = ["NT", "NN", "TT", "TN"]


def _shapes(b: tuple[int, int], m: int, n: int, k: int, ta: bool, tb: bool
            ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return ((b[0], k, m) if ta else (b[0], m, k)), ((b[1], n, k) if tb else (b[1], k, n))


def _product(x: np.ndarray, y: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    """numpy's own product (not the reference under test)."""
    return np.matmul(x.transpose(0, 2, 1) if ta else x, y.transpose(0, 2, 1) if tb else y)


@pytest.mark.parametrize("ta,tb", FLAGS, ids=FLAG_IDS)
@pytest.mark.parametrize("batches", [(3, 3), (1, 3), (3, 1)])
def test_topi_compute_and_reference_match_numpy(ta: bool, tb: bool, batches: tuple) -> None:
    xs, ys = _shapes(batches, 4, 6, 5, ta, tb)
    x, y = te.placeholder(xs, name="x"), te.placeholder(ys, name="y")
    out = topi.nn.batch_matmul(x, y, transpose_a=ta, transpose_b=tb)
    assert out.op.name == f"T_batch_matmul_{'T' if ta else 'N'}{'T' if tb else 'N'}"
    assert tuple(out.shape) == (3, 4, 6)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ys).astype("float32")
    s = te.create_schedule(out.op)
    mod = templtune.build(s, [x, y, out], target="llvm")
    got = np.zeros((3, 4, 6), "float32")
    mod(a, b, got)
    expected = _product(a, b, ta, tb)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ref.batch_matmul_python(a, b, ta, tb), expected, rtol=1e-5,
                               atol=1e-5)


def test_topi_checks_inner_dimensions_and_oshape() -> None:
    x = te.placeholder((2, 4, 5), name="x")
    with pytest.raises(ExprError, match="inner dimensions differ"):
        topi.nn.batch_matmul(x, te.placeholder((2, 6, 5), name="y"), transpose_b=False)
    with pytest.raises(ExprError, match="oshape"):
        topi.nn.batch_matmul(x, te.placeholder((2, 6, 5), name="y"), oshape=(2, 4, 5))
    out = topi.nn.batch_matmul(x, te.placeholder((2, 5, 6), name="y"), oshape=(2, 4, 6),
                               transpose_b=False)
    assert tuple(out.shape) == (2, 4, 6)


def test_network_op_types_flags_and_stores_only_non_defaults() -> None:
    x = relay.var("x", (2, 8, 4))
    assert relay.nn.batch_matmul(x, relay.var("y", (2, 5, 4))).attrs == ()
    c = relay.nn.batch_matmul(x, relay.var("y", (2, 4, 5)), transpose_b=False)
    assert c.shape == (2, 8, 5) and dict(c.attrs) == {"transpose_b": False}
    c = relay.nn.batch_matmul(x, relay.var("y", (2, 5, 8)), transpose_a=True)
    assert c.shape == (2, 4, 5) and dict(c.attrs) == {"transpose_a": True}
    with pytest.raises(relay.GraphError, match="inner dimensions differ"):
        relay.nn.batch_matmul(x, relay.var("y", (2, 5, 4)), transpose_a=True)
    with pytest.raises(relay.GraphError, match=r"\[B, K, N\]"):
        relay.nn.batch_matmul(x, relay.var("y", (4, 5)), transpose_b=False)


@pytest.mark.parametrize("ta,tb", FLAGS, ids=FLAG_IDS)
def test_network_build_runs_the_template_and_extraction_names_the_flags(ta: bool, tb: bool
                                                                        ) -> None:
    xs, ys = _shapes((3, 3), 8, 24, 16, ta, tb)
    x, y = relay.var("x", xs), relay.var("y", ys)
    net = relay.Function((x, y), relay.nn.relu(relay.nn.batch_matmul(
        x, y, transpose_a=ta, transpose_b=tb)))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ys).astype("float32")
    lib = relay.build(net, "llvm", params={"y": b})
    assert lib.groups[0].impl == "autotvm:batch_matmul"
    m = relay.GraphModule(lib)
    m.set_input("x", a)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(_product(a, b, ta, tb), 0),
                               rtol=1e-4, atol=1e-4)
    (task,) = autotvm.task.extract_from_program(net, {}, "llvm")
    extra = () if (ta, tb) == (False, True) else (int(ta), int(tb))
    assert task.args == (3, 8, 24, 16, *extra)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)], ids=["NN", "TT"])
def test_cuda_default_schedule_matches_numpy(ta: bool, tb: bool) -> None:
    from templtune.contrib import graph_executor

    xs, ys = _shapes((2, 2), 5, 7, 6, ta, tb)
    x, y = relay.var("x", xs), relay.var("y", ys)
    net = relay.Function((x, y), relay.nn.batch_matmul(x, y, transpose_a=ta, transpose_b=tb))
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ys).astype("float32")
    lib = relay.build(net, target="cuda", params={"y": b})
    module = graph_executor.GraphModule(lib["default"](templtune.cuda(0)))
    module.set_input("x", a)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), _product(a, b, ta, tb),
                               rtol=1e-4, atol=1e-4)


# ---- SimplifyExpr: transposes into flags -------------------------------------------------------
def _heads(x: Expr, tokens: int, heads: int, dim: int) -> Call:
    """``[T, H * D]`` split into heads ``[H, T, D]``, as attention does."""
    r = make_call("reshape", [x], newshape=(tokens, heads, dim))
    return make_call("transpose", [r], axes=(1, 0, 2))


def _swap(e: Expr) -> Call:
    return make_call("transpose", [e], axes=(0, 2, 1))


def _bmm(func: Function) -> Call:
    (c,) = [c for c in func.calls() if c.op == "nn.batch_matmul"]
    return c


def _attention(t: int = 6, h: int = 2, d: int = 4) -> tuple[Function, dict[str, np.ndarray]]:
    """Scores and ``P @ V`` as ONNX imports them: ``bmm(Q, K)`` over ``K^T`` written by a swap
    (scaled), transposed back by the importer; ``bmm(P, transpose(V))``."""
    q, k, v = (nn.var(n, (t, h * d)) for n in "qkv")
    scale = nn.var("scale", (1,))
    kt = binary("multiply", _swap(_heads(k, t, h, d)), scale)
    scores = nn.batch_matmul(_heads(q, t, h, d), _swap(kt))
    out = nn.batch_matmul(nn.relu(scores), _swap(_heads(v, t, h, d)))
    return Function((q, k, v, scale), out), {"scale": np.array([0.5], "float32")}


def test_transposes_fold_into_the_flag_unless_they_compose_into_rows() -> None:
    func, params = _attention()
    new = simplify_reshapes(func)
    pv = new.body
    assert pv.op == "nn.batch_matmul" and dict(pv.attrs) == {"transpose_b": False}
    assert pv.args[1].op == "transpose" and pv.args[1].attr("axes") == (1, 0, 2)
    scores = pv.args[0].args[0]
    assert scores.op == "nn.batch_matmul" and scores.attrs == ()  # K^T's swap back stays
    assert scores.args[1].op == "transpose"
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal((6, 8)).astype("float32") for n in "qkv"}
    expected = graph.evaluate(func, params, **inputs)
    np.testing.assert_allclose(graph.evaluate(new, params, **inputs), expected, rtol=1e-5,
                               atol=1e-5)
    with transform.PassContext(opt_level=3):
        lib = graph.build(func, "llvm", params)
    m = graph.GraphModule(lib)
    for n, a in inputs.items():
        m.set_input(n, a)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_folds_into_transpose_a_and_flips_back_to_the_default() -> None:
    a, b, b2 = nn.var("a", (2, 5, 3)), nn.var("b", (2, 5, 4)), nn.var("b2", (2, 4, 5))
    c = simplify_reshapes(Function((a, b), nn.batch_matmul(_swap(a), b, transpose_b=False))).body
    assert c.args[0] is a and dict(c.attrs) == {"transpose_a": True, "transpose_b": False}
    c = simplify_reshapes(Function((a, b2), nn.batch_matmul(
        _swap(a), _swap(b2), transpose_b=False))).body
    assert c.args == (a, b2) and dict(c.attrs) == {"transpose_a": True}


def test_a_transpose_with_another_reader_stays() -> None:
    a, b = nn.var("a", (2, 4, 3)), nn.var("b", (2, 3, 5))
    bt = _swap(b)
    func = Function((a, b), nn.add(nn.batch_matmul(a, bt), nn.batch_matmul(a, bt)))
    assert all(c.args[1] is bt for c in simplify_reshapes(func).calls()
               if c.op == "nn.batch_matmul")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flags=st.sampled_from(FLAGS), swaps=st.lists(st.booleans(), min_size=2, max_size=2),
       perms=st.lists(st.permutations([0, 1, 2]), min_size=2, max_size=2),
       scaled=st.booleans(), seed=st.integers(0, 99))
def test_simplified_products_compute_the_same(flags, swaps, perms, scaled, seed) -> None:
    """Each operand a random permutation of a variable (optionally scaled), then a swap of
    the last two axes or not, under random flags: the simplified network computes the same,
    and a swap folds exactly when no last-axis-moving transpose sits above it."""
    ta, tb = flags
    rng = np.random.default_rng(seed)
    xs, ys = _shapes((2, 2), 3, 4, 5, ta ^ swaps[0], tb ^ swaps[1])
    ops, srcs, params = [], [], {"s": np.array([1.5], "float32")}
    scale = nn.var("s", (1,))
    for name, shape, perm, swap in (("x", xs, perms[0], swaps[0]), ("y", ys, perms[1], swaps[1])):
        src = nn.var(name, tuple(shape[i] for i in np.argsort(perm)))
        e: Expr = make_call("transpose", [src], axes=tuple(perm))
        if scaled:
            e = binary("multiply", e, scale)
        ops.append(_swap(e) if swap else e)
        srcs.append(src)
    func = Function((*srcs, scale), nn.batch_matmul(*ops, transpose_a=ta, transpose_b=tb))
    new = simplify_reshapes(func)
    c = _bmm(new)
    got = (bool(c.attr("transpose_a", False)), bool(c.attr("transpose_b", True)))
    for k, (perm, swap) in enumerate(zip(perms, swaps)):
        # the swap nearest the product folds unless a transpose above it moves the last axis
        fold = perm[-1] == 2 if swap else (not scaled and tuple(perm) == (0, 2, 1))
        assert (got[k] != flags[k]) == fold, (k, perm, swap)
    data = {src.name: rng.standard_normal(src.shape).astype("float32") for src in srcs}
    np.testing.assert_allclose(graph.evaluate(new, params, **data),
                               graph.evaluate(func, params, **data), rtol=1e-5, atol=1e-5)


def test_extraction_gives_the_workloads_build_asks_for() -> None:
    """Tasks are extracted from the network as build partitions it (after SimplifyExpr), so a
    folded flag is in the task a user tunes."""
    from templtune.autotvm.dispatcher import FallbackContext

    class Asked(FallbackContext):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[tuple] = []

        def _query_inside(self, target, workload):  # type: ignore[no-untyped-def]
            self.asked.append(workload)
            return super()._query_inside(target, workload)

    func, params = _attention()
    with transform.PassContext(opt_level=3):
        tasks = autotvm.task.extract_from_program(func, params, "llvm")
        with Asked() as ctx:
            graph.build(func, "llvm", params)
    assert {t.workload for t in tasks} == set(ctx.asked)
    assert ("batch_matmul", 2, 6, 4, 6, 0, 0) in ctx.asked
