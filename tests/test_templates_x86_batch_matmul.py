"""x86 batch_matmul: seeded configs match numpy; ``nn.batch_matmul`` networks built by
``relay.build`` run the template (equal batches) or the default schedule (broadcast) and match
the numpy interpreter; task extraction finds it."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import auto_scheduler, autotvm, relay
from templtune.autotvm import strategy
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.topi import testing as ref

strategy.load_templates()
N_CONFIGS = 20

WORKLOADS = [  # (B, M, N, K[, transpose_a, transpose_b]), configs sampled
    ((2, 16, 32, 24), N_CONFIGS),
    ((3, 7, 20, 9), 6),
    ((1, 1, 48, 16), 6),
    ((2, 16, 32, 24, 0, 0), 6),  # y [B, K, N]
    ((2, 7, 20, 9, 0, 0), 6),  # ... with padded columns
    ((2, 16, 32, 24, 1, 1), 6),  # x [B, K, M]
    ((2, 7, 20, 9, 1, 0), 6),
    ((1, 1, 48, 16, 1, 0), 6),
]


@pytest.mark.parametrize("args,count", WORKLOADS, ids=[",".join(map(str, a)) for a, _ in WORKLOADS])
def test_seeded_configs_match_numpy(args: tuple, count: int) -> None:
    rng = np.random.default_rng(7)
    b, m, n, k, *flags = args
    ta, tb = (bool(flags[0]), bool(flags[1])) if flags else (False, True)
    x = rng.standard_normal((b, k, m) if ta else (b, m, k)).astype(np.float32)
    y = rng.standard_normal((b, n, k) if tb else (b, k, n)).astype(np.float32)
    expected = ref.batch_matmul_python(x, y, ta, tb)
    task = autotvm.task.create("batch_matmul", args, "llvm")
    space = task.config_space
    assert len(space) > 1 and task.flop == 2.0 * b * m * n * k
    idx = space.sample_ints(min(count, len(space)), rng=np.random.default_rng(0))
    for i in [None, *idx]:
        cfg = FallbackConfigEntity() if i is None else space.get(int(i))
        with autotvm.ApplyConfig(cfg):
            s, bufs = task.func(*task.args)
        mod = templtune.build(s, bufs, target="llvm")
        out = np.zeros(expected.shape, np.float32)
        mod(x, y, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def _net(by: int) -> relay.Function:
    x, y = relay.var("x", (3, 8, 16)), relay.var("y", (by, 24, 16))
    return relay.Function((x, y), relay.nn.relu(relay.nn.batch_matmul(x, y)))


@pytest.mark.parametrize("by,impl", [(3, "autotvm:batch_matmul"), (1, "default")])
def test_network_build_matches_the_interpreter(by: int, impl: str) -> None:
    rng = np.random.default_rng(1)
    net = _net(by)
    x = rng.standard_normal((3, 8, 16)).astype(np.float32)
    y = rng.standard_normal((by, 24, 16)).astype(np.float32)
    lib = relay.build(net, "llvm", params={"y": y})
    assert lib.groups[0].impl == impl
    m = relay.GraphModule(lib)
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), relay.evaluate(net, {"y": y}, x=x),
                               rtol=1e-4, atol=1e-4)


def test_extraction_finds_the_op() -> None:
    (task,) = autotvm.task.extract_from_program(_net(3), {}, "llvm")
    assert (task.name, task.args) == ("batch_matmul", (3, 8, 24, 16))
    tasks, weights = auto_scheduler.extract_tasks(_net(3), {}, "llvm")
    assert len(tasks) == 1 and weights == [1]


def test_builder_checks_shapes_and_options() -> None:
    x = relay.var("x", (2, 4, 8))
    with pytest.raises(relay.GraphError, match="inner dimensions"):
        relay.nn.batch_matmul(x, relay.var("y", (2, 5, 7)))
    with pytest.raises(relay.GraphError, match="neither match nor broadcast"):
        relay.nn.batch_matmul(x, relay.var("y", (3, 5, 8)))
    with pytest.raises(relay.GraphError, match="out_dtype"):
        relay.nn.batch_matmul(x, relay.var("y", (2, 5, 8)), out_dtype="float16")


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm"])
def test_prime_columns_run_padded_whole_vector_tiles(target: str) -> None:
    # attention scores: N = 197 tokens, which no multiple of 8 divides; the columns are padded
    # to whole vectors (zeros packed) instead of one-lane tiles
    from templtune.codegen.llvm.asm_loops import hottest_loop
    from templtune.target import Target

    args = (2, 197, 197, 16)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 197, 16)).astype(np.float32)
    y = rng.standard_normal((2, 197, 16)).astype(np.float32)
    with Target(target):
        task = autotvm.task.create("batch_matmul", args, target)
        widths = {e.size[-1] for e in task.config_space.space_map["tile_x"].entities}
        cfg = FallbackConfigEntity()
        with autotvm.ApplyConfig(cfg):
            s, bufs = task.func(*args)
    assert 1 in widths and {8, 16} <= widths
    bn = cfg["tile_x"].size[-1]
    assert bn % 8 == 0 and cfg["tile_x"].size[0] == -(-197 // bn)
    mod = templtune.build(s, bufs, target=target)
    out = np.zeros((2, 197, 197), np.float32)
    mod(x, y, out)
    np.testing.assert_allclose(out, ref.batch_matmul_python(x, y), rtol=1e-4, atol=1e-4)
    loop = hottest_loop(mod.get_source("asm"))
    assert loop.accumulators >= 8 and loop.stack_accesses == 0
