"""``nn.batch_attention`` and the ``FuseAttention`` pass: the x86 template's configs against
numpy, the op on the default schedules (CPU and the CUDA emulator), and the rewrite of
``batch_matmul -> softmax -> batch_matmul`` chains: where it applies, where it must not, and
that networks compute the same with it."""

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
from templtune.graph.attention import fuse_attention, fuse_attention_for
from templtune.graph.ir import Expr, Function
from templtune.graph.op import GraphError, make_call
from templtune.target import Target

strategy.load_templates()
N_CONFIGS = 20


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, tb: bool = True,
               tv: bool = False) -> np.ndarray:
    """numpy's own attention (not the op's reference under test)."""
    s = np.matmul(q.astype(np.float64), (k.transpose(0, 2, 1) if tb else k).astype(np.float64))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.matmul(p, (v.transpose(0, 2, 1) if tv else v).astype(np.float64))


def _arrays(args: tuple[int, ...], seed: int) -> list[np.ndarray]:
    b, m, n, d, dv, *flag = args
    tb = bool(flag[0]) if flag else True
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in
            ((b, m, d), (b, n, d) if tb else (b, d, n), (b, n, dv))]


def _run(task: autotvm.task.Task, cfg: object, arrays: list[np.ndarray]) -> np.ndarray:
    with autotvm.ApplyConfig(cfg):
        s, bufs = task.func(*task.args)
    mod = templtune.build(s, bufs, target="llvm")
    b, m, _ = arrays[0].shape
    out = np.zeros((b, m, arrays[2].shape[2]), np.float32)
    mod(*arrays, out)
    return out


WORKLOADS = [  # (B, M, N, D, DV[, transpose_b]), configs sampled
    ((2, 16, 32, 16, 16), N_CONFIGS),
    ((3, 7, 20, 9, 5), 6),  # rows, columns and depths off every block
    ((2, 9, 13, 8, 24, 0), 6),  # k [B, D, N]
    ((1, 1, 48, 16, 32), 4),  # one query row
]


@pytest.mark.parametrize("args,count", WORKLOADS, ids=[",".join(map(str, a)) for a, _ in WORKLOADS])
def test_seeded_configs_match_numpy(args: tuple, count: int) -> None:
    arrays = _arrays(args, 7)
    tb = bool(args[5]) if len(args) > 5 else True
    expected = _attention(*arrays, tb=tb)
    task = autotvm.task.create("batch_attention", args, "llvm")
    space = task.config_space
    b, m, n, d, dv = args[:5]
    assert len(space) > 1 and task.flop == 2.0 * b * m * n * (d + dv) + 4.0 * b * m * n
    idx = space.sample_ints(min(count, len(space)), rng=np.random.default_rng(0))
    for i in [None, *idx]:
        cfg = FallbackConfigEntity() if i is None else space.get(int(i))
        np.testing.assert_allclose(_run(task, cfg, arrays), expected, rtol=1e-4, atol=1e-5,
                                   err_msg=str(cfg))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=st.integers(1, 2), m=st.integers(1, 40), n=st.integers(1, 40),
       d=st.integers(1, 20), dv=st.integers(1, 36), tb=st.booleans(), pick=st.integers(0, 10**6))
def test_random_legal_configs_match_numpy(b: int, m: int, n: int, d: int, dv: int, tb: bool,
                                          pick: int) -> None:
    args = (b, m, n, d, dv) if tb else (b, m, n, d, dv, 0)
    arrays = _arrays(args, pick)
    task = autotvm.task.create("batch_attention", args, "llvm")
    space = task.config_space
    cfg = space.get(int(space.sample_ints(1, rng=np.random.default_rng(pick))[0]))
    np.testing.assert_allclose(_run(task, cfg, arrays), _attention(*arrays, tb=tb), rtol=1e-4,
                               atol=1e-5, err_msg=f"{args} {cfg}")


def test_space_blocks_fit_the_register_file() -> None:
    """Every point's two register blocks fit the target's registers; tiles hold whole blocks."""
    for target, regs in (("llvm -mcpu=haswell", 16), ("llvm -mcpu=skylake-avx512", 32)):
        with Target(target):
            task = autotvm.task.create("batch_attention", (12, 197, 197, 64, 64), target)
        lanes = 8 if regs == 16 else 16
        space = task.config_space
        for i in space.sample_ints(len(space), rng=np.random.default_rng(0)):
            cfg = space.get(int(i))
            rb, bn, rbo, dvb = (cfg[k].val for k in ("rb", "bn", "rb_out", "dvb"))
            assert rb * (bn // lanes) < regs and rbo * (dvb // lanes) < regs
            assert cfg["mb"].val % rb == 0 and cfg["mb"].val % rbo == 0


# ---- the network op ------------------------------------------------------------------------
def test_builder_types_flags_and_rejects_bad_shapes() -> None:
    q, k, v = relay.var("q", (2, 5, 4)), relay.var("k", (2, 4, 7)), relay.var("v", (2, 3, 7))
    call = relay.nn.batch_attention(q, k, v, transpose_b=False, transpose_v=True)
    assert call.shape == (2, 5, 3) and dict(call.attrs) == {"transpose_b": False,
                                                            "transpose_v": True}
    assert dict(relay.nn.batch_attention(q, relay.var("k2", (2, 7, 4)),
                                         relay.var("v2", (2, 7, 3))).attrs) == {}
    with pytest.raises(GraphError, match="depth"):
        relay.nn.batch_attention(q, relay.var("k3", (2, 7, 5)), relay.var("v3", (2, 7, 3)))
    with pytest.raises(GraphError, match="length"):
        relay.nn.batch_attention(q, relay.var("k4", (2, 7, 4)), relay.var("v4", (2, 6, 3)))
    with pytest.raises(GraphError, match="batches"):
        relay.nn.batch_attention(q, relay.var("k5", (1, 7, 4)), relay.var("v5", (2, 7, 3)))


@pytest.mark.parametrize("tb,tv", [(True, False), (False, True)])
def test_op_on_default_schedules_matches_numpy(tb: bool, tv: bool) -> None:
    from templtune.contrib import graph_executor

    args = (2, 5, 7, 6, 3) if tb else (2, 5, 7, 6, 3, 0)
    qa, ka, va = _arrays(args, 3)
    if tv:
        va = np.ascontiguousarray(va.transpose(0, 2, 1))
    q, k, v = (relay.var(n, a.shape) for n, a in zip("qkv", (qa, ka, va)))
    net = relay.Function((q, k, v), relay.nn.batch_attention(q, k, v, tb, tv))
    expected = _attention(qa, ka, va, tb, tv)
    np.testing.assert_allclose(graph.evaluate(net, {}, q=qa, k=ka, v=va), expected,
                               rtol=1e-5, atol=1e-6)
    for target, dev in (("llvm", templtune.cpu(0)), ("cuda", templtune.cuda(0))):
        with transform.PassContext(config={"templtune.graph.use_templates": False}):
            lib = relay.build(net, target=target)
        assert lib.groups[0].impl == "default"
        m = graph_executor.GraphModule(lib["default"](dev))
        for name, a in zip("qkv", (qa, ka, va)):
            m.set_input(name, a)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


# ---- the rewrite -----------------------------------------------------------------------------
B, T, D = 3, 11, 8


def _chain(tb: bool = True, tv: bool = False, axis: int = -1, unit: bool = True,
           extra_reader: bool = False) -> Function:
    """``bmm -> softmax -> bmm`` as the ONNX importer leaves it (a 4-D softmax between unit
    reshapes when ``unit``)."""
    q = nn.var("q", (B, T, D))
    k = nn.var("k", (B, T, D) if tb else (B, D, T))
    v = nn.var("v", (B, D, T) if tv else (B, T, D))
    s: Expr = nn.batch_matmul(q, k, transpose_b=tb)
    if unit:
        s = make_call("reshape", [s], newshape=(1, B, T, T))
    p: Expr = nn.softmax(s, axis=axis)
    if unit:
        p = make_call("reshape", [p], newshape=(B, T, T))
    out: Expr = nn.batch_matmul(p, v, transpose_b=tv)
    if extra_reader:  # the probabilities are also an output of the network
        out = make_call("concatenate", [out, p], axis=2)
    return Function((q, k, v), nn.relu(out))


def _ops(func: Function) -> list[str]:
    return [c.op for c in func.calls()]


@pytest.mark.parametrize("tb", [True, False])
def test_chain_builds_as_one_kernel_and_computes_the_same(tb: bool) -> None:
    func = _chain(tb=tb)
    assert "nn.batch_attention" in _ops(fuse_attention(func))
    rng = np.random.default_rng(5)
    data = {p.name: rng.standard_normal(p.shape).astype(np.float32) for p in func.params}
    expected = np.maximum(_attention(data["q"], data["k"], data["v"], tb=tb), 0)
    np.testing.assert_allclose(graph.evaluate(func, {}, **data), expected, rtol=1e-5, atol=1e-6)
    with transform.PassContext(opt_level=3):
        lib = relay.build(func, "llvm", params={"k": data["k"]})
    assert [g.impl for g in lib.groups] == ["autotvm:batch_attention"]
    m = relay.GraphModule(lib)
    m.set_input("q", data["q"])
    m.set_input("v", data["v"])
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)
    (task,) = autotvm.task.extract_from_program(func, {}, "llvm")
    assert (task.name, task.args) == ("batch_attention", (B, T, T, D, D, *(() if tb else (0,))))


@pytest.mark.parametrize("kw", [{"axis": 2}, {"extra_reader": True}],
                         ids=["softmax-not-last", "probabilities-read-twice"])
def test_chains_that_are_not_attention_stay(kw: dict) -> None:
    func = _chain(**kw)
    assert fuse_attention(func) is func


def test_only_chains_a_template_takes_are_rewritten() -> None:
    """``v`` as ``[B, DV, N]`` has no x86 template: the three ops stay (their own templates)."""
    func = _chain(tv=True)
    assert "nn.batch_attention" in _ops(fuse_attention(func))
    assert fuse_attention_for(func, transform.PassContext(opt_level=3), Target("llvm")) is func


@pytest.mark.parametrize("ctx,target", [
    ({"opt_level": 3, "disabled_pass": ["FuseAttention"]}, "llvm"),
    ({"opt_level": 0}, "llvm"),
    ({"opt_level": 3, "config": {"templtune.graph.use_templates": False}}, "llvm"),
    ({"opt_level": 3}, "cuda"),
], ids=["disabled", "no-fusion", "no-templates", "no-strategy"])
def test_pass_runs_only_where_the_build_would_use_it(ctx: dict, target: str) -> None:
    func = _chain()
    assert fuse_attention_for(func, transform.PassContext(**ctx), Target(target)) is func
    assert "nn.batch_attention" in _ops(
        fuse_attention_for(func, transform.PassContext(opt_level=3), Target("llvm")))


def test_a_reshape_that_moves_the_scores_axis_ends_the_match() -> None:
    """One query row: ``[B, 1, N]`` probabilities reshaped to ``[B, N, 1]`` keep their non-unit
    dims, but the product then reduces over a unit axis: not attention."""
    q, k, v = nn.var("q", (B, 1, D)), nn.var("k", (B, T, D)), nn.var("v", (B, 1, D))
    p = make_call("reshape", [nn.softmax(nn.batch_matmul(q, k))], newshape=(B, T, 1))
    func = Function((q, k, v), nn.batch_matmul(p, v, transpose_b=False))
    assert fuse_attention(func) is func
    rng = np.random.default_rng(4)
    data = {x.name: rng.standard_normal(x.shape).astype(np.float32) for x in func.params}
    lib = relay.build(func, "llvm")
    m = relay.GraphModule(lib)
    for name, a in data.items():
        m.set_input(name, a)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(func, {}, **data),
                               rtol=1e-4, atol=1e-5)


def test_pass_stays_off_under_auto_scheduler_records() -> None:
    """Auto-scheduler records were tuned on the unfused groups: build keeps them."""
    from templtune import auto_scheduler

    func = _chain()
    with auto_scheduler.ApplyHistoryBest([]):
        assert fuse_attention_for(func, transform.PassContext(opt_level=3), Target("llvm")) is func
        off = {"relay.backend.use_auto_scheduler": False}
        assert "nn.batch_attention" in _ops(fuse_attention_for(
            func, transform.PassContext(opt_level=3, config=off), Target("llvm")))
