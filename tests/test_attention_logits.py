"""``nn.batch_attention`` with a scale and a padding mask on the scores (a BERT's
``q @ k^T / sqrt(d) + mask``): the x86 template's configs, the op on the default schedules and
the ``FuseAttention`` rewrite of the chains that carry them, each against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm, graph, relay, transform
from templtune.autotvm import strategy
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.graph import nn
from templtune.graph.attention import fuse_attention
from templtune.graph.ir import Call, Expr, Function
from templtune.graph.op import GraphError, make_call

strategy.load_templates()
SCALE = 0.37


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: int = 0,
               bias: np.ndarray | None = None, tb: bool = True) -> np.ndarray:
    """numpy's attention with the scores multiplied (1) or divided (2) by ``SCALE`` and a
    ``[G, N]`` (or ``[G, M, N]``) bias added, its entry ``b // (B / G)`` to batch ``b``."""
    s = np.matmul(q.astype(np.float64), (k.transpose(0, 2, 1) if tb else k).astype(np.float64))
    s = s * SCALE if scale == 1 else s / SCALE if scale == 2 else s
    if bias is not None:
        g = bias.astype(np.float64)[np.arange(s.shape[0]) // (s.shape[0] // len(bias))]
        s = s + (g if g.ndim == 3 else g[:, None, :])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.matmul(p / p.sum(axis=-1, keepdims=True), v.astype(np.float64))


def _operands(args: tuple[int, ...], seed: int) -> list[np.ndarray]:
    b, m, n, d, dv, tb, scale, groups = args[:8]
    rows = args[8] if len(args) > 8 else 0
    rng = np.random.default_rng(seed)
    out = [(rng.standard_normal(s) * 0.5).astype(np.float32)
           for s in ((b, m, d), (b, n, d) if tb else (b, d, n), (b, n, dv))]
    if scale:
        out.append(np.array([SCALE], np.float32))
    if groups:
        # NOTE: a padding mask: -10000 on some columns, small values elsewhere; with rows,
        # a causal one too (finfo.min above the diagonal, every row keeping its first column)
        shape = (groups, m, n) if rows else (groups, n)
        mask = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        mask[rng.random(shape) < 0.3] = -10000.0
        # every row keeps a column, as a padded sequence does: with all masked, float32 logits
        # near -10000 keep 3 digits, which no float32 engine matches numpy's float64 to
        mask[..., 0] = np.where(mask[..., 0] == -10000.0, 0.0, mask[..., 0])
        if rows:
            mask[:, np.triu(np.ones((m, n), bool), 1)] = np.finfo(np.float32).min
            mask[:, :, 0] = 0.0
        out.append(mask)
    return out


def _expected(args: tuple[int, ...], arrays: list[np.ndarray]) -> np.ndarray:
    scale, groups = args[6], args[7]
    return _attention(*arrays[:3], scale=scale, bias=arrays[-1] if groups else None,
                      tb=bool(args[5]))


def _run(args: tuple[int, ...], cfg: object, arrays: list[np.ndarray]) -> np.ndarray:
    task = autotvm.task.create("batch_attention", args, "llvm")
    with autotvm.ApplyConfig(cfg):
        s, bufs = task.func(*task.args)
    assert len(bufs) == len(arrays) + 1
    out = np.zeros((args[0], args[1], args[4]), np.float32)
    templtune.build(s, bufs, target="llvm")(*arrays, out)
    return out


WORKLOADS = [  # (B, M, N, D, DV, transpose_b, scale, bias_groups[, bias_rows])
    (4, 33, 37, 16, 16, 1, 2, 2),  # divided, one mask row per two heads
    (3, 7, 20, 9, 5, 1, 1, 0),  # multiplied, no mask; sizes off every block
    (2, 9, 13, 8, 24, 0, 0, 2),  # a mask row per batch, k [B, D, N]
    (6, 16, 64, 16, 16, 1, 2, 1),  # one mask for all
    (4, 19, 19, 16, 16, 1, 2, 1, 1),  # causal: a mask per query row, shared by all
    (4, 5, 21, 8, 8, 0, 1, 2, 1),  # a mask per row and sequence; columns off the blocks
]


@pytest.mark.parametrize("args", WORKLOADS, ids=[",".join(map(str, a)) for a in WORKLOADS])
def test_seeded_configs_match_numpy(args: tuple[int, ...]) -> None:
    arrays = _operands(args, 11)
    expected = _expected(args, arrays)
    space = autotvm.task.create("batch_attention", args, "llvm").config_space
    for i in [None, *space.sample_ints(min(5, len(space)), rng=np.random.default_rng(1))]:
        cfg = FallbackConfigEntity() if i is None else space.get(int(i))
        np.testing.assert_allclose(_run(args, cfg, arrays), expected, rtol=1e-4, atol=1e-5,
                                   err_msg=str(cfg))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.integers(1, 3), groups=st.integers(0, 2), m=st.integers(1, 30),
       n=st.integers(1, 30), d=st.integers(1, 12), scale=st.integers(0, 2),
       tb=st.integers(0, 1), rows=st.integers(0, 1), pick=st.integers(0, 10**6))
def test_random_legal_configs_match_numpy(heads: int, groups: int, m: int, n: int, d: int,
                                          scale: int, tb: int, rows: int, pick: int) -> None:
    args = (heads * max(groups, 1), m, n, d, 8, tb, scale, groups) + ((1,) if rows and groups
                                                                      else ())
    arrays = _operands(args, pick)
    space = autotvm.task.create("batch_attention", args, "llvm").config_space
    cfg = space.get(int(space.sample_ints(1, rng=np.random.default_rng(pick))[0]))
    np.testing.assert_allclose(_run(args, cfg, arrays), _expected(args, arrays), rtol=1e-4,
                               atol=1e-5, err_msg=f"{args} {cfg}")


def test_template_rejects_bad_extras() -> None:
    with pytest.raises(ValueError, match="scale must be"):
        autotvm.task.create("batch_attention", (2, 4, 4, 4, 4, 1, 3, 0), "llvm")
    with pytest.raises(ValueError, match="bias_groups must divide"):
        autotvm.task.create("batch_attention", (6, 4, 4, 4, 4, 1, 0, 4), "llvm")
    with pytest.raises(ValueError, match="bias_rows must be"):
        autotvm.task.create("batch_attention", (6, 4, 4, 4, 4, 1, 0, 0, 1), "llvm")


# ---- the network op ----------------------------------------------------------------------
def test_builder_types_attrs_and_rejects_bad_extras() -> None:
    q, k, v = (relay.var(n, (4, 5, 3)) for n in "qkv")
    c, mask = relay.var("c", (1,)), relay.var("mask", (2, 5))
    call = relay.nn.batch_attention(q, k, v, scale=c, bias=mask, scale_divides=True)
    assert call.shape == (4, 5, 3) and dict(call.attrs) == {"scale": "divide", "bias": True}
    assert dict(relay.nn.batch_attention(q, k, v, scale=c).attrs) == {"scale": "multiply"}
    assert relay.nn.batch_attention(q, k, v, bias=relay.var("rows", (1, 5, 5))).shape == (4, 5, 3)
    for bad, match in (({"bias": relay.var("m3", (3, 5))}, "G dividing the batch 4"),
                       ({"bias": relay.var("m4", (1, 6))}, r"\[G, 5\]"),
                       ({"bias": relay.var("m5", (1, 4, 5))}, r"\[G, 5, 5\]"),
                       ({"scale": relay.var("c2", (2,))}, "shape \\(1,\\)")):
        with pytest.raises(GraphError, match=match):
            relay.nn.batch_attention(q, k, v, **bad)
    with pytest.raises(GraphError, match="expected 4 operands"):
        make_call("nn.batch_attention", [q, k, v], scale="multiply")
    with pytest.raises(GraphError, match="scale must be one of"):
        make_call("nn.batch_attention", [q, k, v, c], scale="add")


def test_op_on_default_schedules_matches_numpy() -> None:
    from templtune.contrib import graph_executor

    args = (4, 5, 7, 6, 3, 1, 2, 2)
    arrays = _operands(args, 3)
    names = ("q", "k", "v", "c", "mask")
    vs = [relay.var(n, a.shape) for n, a in zip(names, arrays)]
    net = relay.Function(vs, relay.nn.batch_attention(*vs[:3], scale=vs[3], bias=vs[4],
                                                      scale_divides=True))
    feeds = dict(zip(names, arrays))
    expected = _expected(args, arrays)
    np.testing.assert_allclose(graph.evaluate(net, {}, **feeds), expected, rtol=1e-5, atol=1e-6)
    for target, dev in (("llvm", templtune.cpu(0)), ("cuda", templtune.cuda(0))):
        with transform.PassContext(config={"templtune.graph.use_templates": False}):
            lib = relay.build(net, target=target)
        m = graph_executor.GraphModule(lib["default"](dev))
        for name, a in feeds.items():
            m.set_input(name, a)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


# ---- the rewrite -----------------------------------------------------------------------------
BATCH, HEADS, T, D = 2, 3, 11, 8


def _bert(mask_shape: tuple[int, ...] = (BATCH, 1, 1, T), scale: str = "divide",
          mask_first: bool = False, layers: int = 1, batch: int = BATCH) -> Function:
    """Attention as an ONNX export of a BERT leaves it: ``[b * h, T, T]`` scores regrouped to
    ``[b, h, T, T]``, divided by a constant, plus a mask, softmax, regrouped back."""
    q, k, v = (nn.var(n, (batch * HEADS, T, D)) for n in "qkv")
    c, mask = nn.var("c", (1,)), nn.var("mask", mask_shape)
    out: Expr = q
    for _ in range(layers):
        s: Expr = make_call("reshape", [nn.batch_matmul(out, k)],
                            newshape=(batch, HEADS, T, T))
        if mask_first:
            s = make_call("add", [s, mask])
        s = make_call(scale, [s, c] if scale == "divide" else [c, s])
        if not mask_first:
            s = (make_call("nn.bias_add", [s, mask], axis=-1) if len(mask_shape) == 1
                 else make_call("add", [mask, s]))
        p = make_call("reshape", [nn.softmax(s, axis=-1)], newshape=(batch * HEADS, T, T))
        out = nn.batch_matmul(p, v, transpose_b=False)
    return Function((q, k, v, c, mask), out)


def _feeds(func: Function) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    data = {p.name: rng.standard_normal(p.shape).astype(np.float32) for p in func.params}
    data["c"] = np.array([SCALE], np.float32)
    data["mask"][..., -3:] = -10000.0
    return data


def _fused(func: Function) -> list[Call]:
    return [c for c in fuse_attention(func).calls() if c.op == "nn.batch_attention"]


@pytest.mark.parametrize("mask_shape,batch,bias_shape", [
    ((BATCH, 1, 1, T), BATCH, (BATCH, T)), ((1, 1, 1, T), BATCH, (1, T)), ((T,), BATCH, (1, T)),
    ((1, T), 1, (1, T)), ((1, 1, T, T), BATCH, (1, T, T)), ((BATCH, 1, T, T), BATCH, (BATCH, T, T)),
    ((T, T), 1, (1, T, T))],
    ids=["per-sequence", "shared", "bias_add", "unit-batch", "causal", "causal-per-sequence",
         "causal-2d"])
def test_masked_chain_builds_as_one_kernel_and_computes_the_same(
        mask_shape: tuple[int, ...], batch: int, bias_shape: tuple[int, ...]) -> None:
    func = _bert(mask_shape, batch=batch)
    (call,) = _fused(func)
    assert dict(call.attrs) == {"scale": "divide", "bias": True}
    assert call.args[4].shape == bias_shape
    data = _feeds(func)
    mask = data["mask"].reshape(bias_shape)
    expected = _attention(data["q"], data["k"], data["v"], 2, mask)
    np.testing.assert_allclose(graph.evaluate(func, {}, **data), expected, rtol=1e-5, atol=1e-6)
    params = {n: data[n] for n in ("k", "c", "mask")}
    with transform.PassContext(opt_level=3):
        lib = relay.build(func, "llvm", params=params)
    assert "autotvm:batch_attention" in [g.impl for g in lib.groups]
    m = relay.GraphModule(lib)
    m.set_input("q", data["q"])
    m.set_input("v", data["v"])
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)
    (task,) = autotvm.task.extract_from_program(func, params, "llvm")
    rows = (1,) if len(bias_shape) == 3 else ()
    assert (task.name, task.args) == ("batch_attention",
                                      (batch * HEADS, T, T, D, D, 1, 2, bias_shape[0], *rows))


def test_layers_share_one_reshape_of_their_mask() -> None:
    calls = _fused(_bert((1, 1, 1, T), scale="multiply", layers=3))
    assert len(calls) == 3 and {c.attr("scale") for c in calls} == {"multiply"}
    assert len({id(c.args[4]) for c in calls}) == 1


@pytest.mark.parametrize("kw", [
    {"mask_shape": (1, HEADS, 1, T)},  # per head, shared by the sequences
    {"mask_shape": (1, HEADS, T, T)},  # per head and query row
    {"mask_first": True},  # a scale after the mask would scale it too
], ids=["per-head", "per-head-rows", "scale-after-mask"])
def test_chains_the_kernel_cannot_take_stay(kw: dict) -> None:
    func = _bert(**kw)
    assert fuse_attention(func) is func
