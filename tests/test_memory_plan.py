"""Storage sharing of a network's intermediate values (``graph.memory_plan``).

The planner's invariant is checked on random call sequences (hypothesis): two values live at
once never share a block, except where a call writes its output over an input it declared
in-place, at that input's last read. The runtime's use of it is checked against the numpy
interpreter of the network (``graph.evaluate``) on a network with fused residual adds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import templtune
from templtune import graph
from templtune.graph.ir import Expr
from templtune.graph.memory_plan import Use, allocate, pack_constants, plan_storage
from templtune.graph.transform import PassContext
from templtune.runtime.aligned import ALIGN, view
from templtune.runtime.aligned import aligned_bytes as arena


def _lives(uses: list[Use], keep: frozenset[int]) -> dict[int, tuple[int, int]]:
    """value -> (call writing it, last call reading it; the end for kept values)."""
    span = {u.writes: [i, i] for i, u in enumerate(uses)}
    for i, u in enumerate(uses):
        for r in u.reads:
            span[r][1] = i
    for k in keep:
        span[k][1] = len(uses)
    return {v: (a, b) for v, (a, b) in span.items()}


@st.composite
def call_sequences(draw: st.DrawFn) -> tuple[list[Use], frozenset[int]]:
    n = draw(st.integers(1, 14))
    uses: list[Use] = []
    for i in range(n):
        reads = tuple(sorted(set(draw(st.lists(st.integers(0, max(0, i - 1)),
                                               max_size=3 if i else 0)))))
        inplace = tuple(r for r in reads if draw(st.booleans()))
        uses.append(Use(reads, i, draw(st.integers(1, 5000)), inplace))
    keep = frozenset(draw(st.sets(st.integers(0, n - 1), max_size=2)))
    return uses, keep


@settings(max_examples=300, deadline=None)
@given(call_sequences())
def test_live_values_never_share_a_block(case: tuple[list[Use], frozenset[int]]) -> None:
    uses, keep = case
    plan = plan_storage(uses, keep)
    lives = _lives(uses, keep)
    for u in uses:
        assert plan.sizes[plan.block_of[u.writes]] >= u.nbytes
    assert all(s % ALIGN == 0 for s in plan.sizes)
    for i, u in enumerate(uses):
        for v, (a, b) in lives.items():
            if v == u.writes or plan.block_of[v] != plan.block_of[u.writes] or not a <= i <= b:
                continue
            # the only overlap allowed: the call writes over an in-place input it reads last
            assert i == b and v in u.inplace and v not in keep and u.reads.count(v) == 1, (
                f"call {i} writes value {u.writes} over value {v}, live {a}..{b}")
    for k in keep:
        assert sum(b == plan.block_of[k] for b in plan.block_of.values()) == 1


def test_chain_reuses_two_blocks_and_inplace_one() -> None:
    chain = [Use((i - 1,) if i else (), i, 1000) for i in range(6)]
    plan = plan_storage(chain, keep=frozenset({5}))
    # a chain needs two blocks ping-ponging, plus the output's own
    assert len(plan.sizes) == 3 and plan.total == 3 * 1024
    inplace = [Use((i - 1,) if i else (), i, 1000, (i - 1,) if i else ()) for i in range(6)]
    plan = plan_storage(inplace)
    assert len(plan.sizes) == 1


def test_inplace_is_refused_while_the_input_is_read_later() -> None:
    uses = [Use((), 0, 64), Use((0,), 1, 64, (0,)), Use((0, 1), 2, 64)]
    plan = plan_storage(uses)
    assert plan.block_of[1] != plan.block_of[0]


def test_bad_sequences_name_the_problem() -> None:
    with pytest.raises(ValueError, match="reads value 7 before"):
        plan_storage([Use((7,), 0, 4)])
    with pytest.raises(ValueError, match="writes value 0, which call 0 already wrote"):
        plan_storage([Use((), 0, 4), Use((0,), 0, 4)])


def test_blocks_are_aligned_views() -> None:
    blocks = allocate(plan_storage([Use((), 0, 100), Use((0,), 1, 300)]))
    for b in blocks:
        assert b.ctypes.data % ALIGN == 0 and not b.any()
    v = view(blocks[0], (5, 5), "float32")
    assert v.shape == (5, 5) and v.flags.c_contiguous and np.shares_memory(v, blocks[0])


@pytest.mark.parametrize("nbytes", [1, 1000, 5 * 2**20 + 3])
def test_arena_is_zeroed_aligned_and_writable(nbytes: int) -> None:
    mem = arena(nbytes)
    assert mem.size == nbytes and mem.dtype == np.uint8 and mem.flags.writeable
    assert mem.ctypes.data % ALIGN == 0 and not mem.any()
    mem[-1] = 7
    assert mem[-1] == 7


def test_pack_constants_copies_side_by_side() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype("float32")
    b = np.arange(7, dtype="int32")
    packed = pack_constants([a, b, a])
    np.testing.assert_array_equal(packed[0], a)
    np.testing.assert_array_equal(packed[1], b)
    assert packed[2] is packed[0] or np.shares_memory(packed[2], packed[0])
    assert not np.shares_memory(packed[0], a)
    assert all(p.ctypes.data % ALIGN == 0 and p.flags.c_contiguous for p in packed)
    assert packed[1].ctypes.data - packed[0].ctypes.data == ALIGN  # 60 bytes, rounded


def _residual_net() -> tuple[graph.Function, dict[str, np.ndarray]]:
    from templtune.graph import nn

    rng = np.random.default_rng(0)
    x = nn.var("data", shape=(1, 32, 8, 8))
    params: dict[str, np.ndarray] = {}
    args = [x]

    def conv(name: str, inp: Expr, c: int) -> Expr:
        w = nn.var(name, shape=(c, 32, 3, 3))
        b = nn.var(name + "_b", shape=(c,))
        args.extend((w, b))
        params[name] = (rng.standard_normal((c, 32, 3, 3)) * 0.1).astype("float32")
        params[name + "_b"] = rng.standard_normal(c).astype("float32")
        return nn.bias_add(nn.conv2d(inp, w, padding=(1, 1), channels=c, kernel_size=(3, 3)), b)

    y = x
    for k in range(3):
        y = nn.relu(nn.add(conv(f"c{k}", nn.relu(conv(f"a{k}", y, 32)), 32), y))
    return graph.Function(tuple(args), y), params


def test_network_writes_residuals_in_place_and_matches_numpy() -> None:
    net, params = _residual_net()
    x = np.random.default_rng(1).standard_normal((1, 32, 8, 8)).astype("float32")
    with PassContext(opt_level=3):
        lib = graph.build(net, "llvm", params)
    rt = lib["default"](templtune.cpu())
    steps = [s for cg in lib.groups for s in cg.steps]
    over = [(k, s) for k, s in enumerate(steps) if s.inplace]
    assert over, "the fused residual adds should declare their residual in-place"
    shared = [k for k, s in over
              if np.shares_memory(rt.plan[k][1][s.inplace[0]], rt.plan[k][1][-1])]
    assert shared, "some residual add should write its output over the residual"
    used, unshared = rt.storage_bytes
    assert used < unshared
    # the weights the kernels read are copies in one arena, not the build's arrays
    built = [*params.values(), *(e for s in steps for e in s.inputs if isinstance(e, np.ndarray))]
    read = [a for _, args in rt.plan for a in args[:-1]]
    assert not any(np.may_share_memory(a, c) for a in read for c in built)
    m = graph.GraphModule(rt)
    ref = graph.evaluate(net, params, data=x)
    m.set_input("data", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-5)
    # timing each group where the runs reach it leaves every value as a run leaves it
    prof = m.profile(number=2)
    assert len(prof) == len(lib.groups) and all(t > 0 for _, _, t in prof)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-5)


def _reshape_net() -> tuple[graph.Function, dict[str, np.ndarray]]:
    """dense -> reshape (a group of its own: layer_norm ends the chain) read by a later layer
    while its source is read after it too, and a network output that is a reshape."""
    from templtune.graph import nn
    from templtune.graph.op import make_call

    rng = np.random.default_rng(4)
    params = {k: rng.standard_normal(s).astype("float32")
              for k, s in (("w1", (12, 12)), ("w2", (12, 12)), ("g", (12,)), ("b", (12,)))}
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    x = nn.var("x", (5, 12))
    ln = make_call("nn.layer_norm", [nn.dense(x, v["w1"]), v["g"], v["b"]], axis=1,
                   epsilon=1e-5)
    flat = make_call("reshape", [ln], newshape=(1, 5, 12))
    y = nn.dense(make_call("reshape", [flat], newshape=(5, 12)), v["w2"])
    z = nn.add(y, ln)  # ln read after the view of it
    out = make_call("reshape", [make_call("nn.layer_norm", [z, v["g"], v["b"]], axis=1,
                                          epsilon=1e-5)], newshape=(60,))
    return graph.Function((x, *v.values()), out), params


def test_reshape_groups_are_views_of_their_input() -> None:
    from templtune.graph.memory_plan import View

    net, params = _reshape_net()
    x = np.random.default_rng(5).standard_normal((5, 12)).astype("float32")
    ref = graph.evaluate(net, params, x=x)
    with PassContext(opt_level=3, disabled_pass=["SimplifyExpr"]):
        lib = graph.build(net, "llvm", params)
    views = [cg for cg in lib.groups if isinstance(cg.steps[0].kernel, View)]
    assert len(views) == 2 and all(cg.kernels == () and cg.impl == "view" for cg in views)
    rt = lib["default"](templtune.cpu())
    for kernel, args in rt.plan:
        if isinstance(kernel, View):
            assert np.shares_memory(args[0], args[-1])  # no copy: the output is the input
    m = graph.GraphModule(rt)
    m.set_input("x", x)
    for _ in range(2):
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-4)
    assert len(m.profile(number=1)) == len(lib.groups)


def test_views_extend_their_source_lifetime() -> None:
    from templtune.graph.memory_plan import View, step_uses, view_roots

    class S:
        def __init__(self, kernel, inputs, output):
            self.kernel, self.inputs, self.output, self.inplace = kernel, inputs, output, ()

    vals = [type("V", (), {"shape": (4,), "dtype": "float32"})() for _ in range(4)]
    steps = [S("k", (), vals[0]), S(View((2, 2)), (vals[0],), vals[1]),
             S(View((4,)), (vals[1],), vals[2]), S("k", (vals[2],), vals[3])]
    assert view_roots(steps) == {id(vals[1]): id(vals[0]), id(vals[2]): id(vals[0])}
    uses = step_uses(steps)
    assert [(u.reads, u.writes) for u in uses] == [((), id(vals[0])),
                                                   ((id(vals[0]),), id(vals[3]))]
