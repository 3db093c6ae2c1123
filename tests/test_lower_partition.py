"""Loop partitioning: the partial last iteration of a non-divisible split is peeled off, the
full iterations run without guards, and every split still computes what numpy computes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import templtune
from templtune import te
from templtune.lower.ir import Buffer, For, ForKind, IfThenElse, SeqStmt, Store
from templtune.lower.partition import partition_loops
from templtune.te.expr import Call, const
from templtune.te.functor import collect


def _blocked(n: int, factor: int):
    """``C[i, x, :] = sum_k A[i, x, k] * W[k, :] + 1`` with ``x`` split by ``factor``, the
    accumulator computed at the outer block and its pixels unrolled (a micro-kernel's shape)."""
    a = te.placeholder((3, n, 8), name="A")
    w = te.placeholder((8, 8), name="W")
    k = te.reduce_axis((0, 8), name="k")
    b = te.compute((3, n, 8), lambda i, x, v: te.sum(a[i, x, k] * w[k, v], axis=[k]), name="B")
    c = te.compute((3, n, 8), lambda i, x, v: b[i, x, v] + 1.0, name="C")
    s = te.create_schedule(c.op)
    i, x, v = s[c].op.axis
    xo, xi = s[c].split(x, factor=factor)
    s[c].reorder(i, xo, xi, v)
    s[c].vectorize(v)
    s[b].compute_at(s[c], xo)
    _, bx, bv = s[b].op.axis
    s[b].reorder(s[b].op.reduce_axis[0], bx, bv)
    s[b].unroll(bx)
    s[b].vectorize(bv)
    return s, [a, w, c]


def _outer_loops(body) -> list[For]:
    return [f for f in collect(body, lambda x: isinstance(x, For)) if f.loop_var.name == "x.outer"]


def _check_numpy(s, args, n: int, target: str = "llvm") -> None:
    mod = templtune.build(s, args, target)
    rng = np.random.default_rng(n)
    a = rng.standard_normal((3, n, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    c = np.zeros((3, n, 8), np.float32)
    mod(a, w, c)
    np.testing.assert_allclose(c, a @ w + 1, rtol=1e-5, atol=1e-5)


def test_the_last_block_is_peeled_and_the_others_lose_their_guards():
    s, args = _blocked(7, 3)
    body = templtune.lower(s, args).body
    (main,) = _outer_loops(body)
    assert int(main.extent.value) == 2  # blocks 0 and 1; block 2 (pixel 6) follows
    assert not collect(main, lambda x: isinstance(x, IfThenElse))
    # the peeled block computes its one pixel only: a third of a full block's updates
    full = collect(main.body, lambda x: type(x).__name__ == "Store" and x.buffer.name == "B")
    every = collect(body, lambda x: type(x).__name__ == "Store" and x.buffer.name == "B")
    assert len(every) - len(full) == len(full) // 3
    _check_numpy(s, args, 7)


def test_a_divisible_split_is_left_alone():
    s, args = _blocked(6, 3)
    body = templtune.lower(s, args).body
    (main,) = _outer_loops(body)
    assert int(main.extent.value) == 2
    assert not collect(body, lambda x: isinstance(x, IfThenElse))


def _guarded_loop(cond):
    x = te.var("x")
    buf = Buffer("out", (const(8),), "float32")
    store = Store(buf, x, const(1.0, "float32"))
    guard = IfThenElse(Call("bool", "likely", (cond(x),)), store)
    return For(x, const(0), const(8), ForKind.SERIAL, guard)


def test_a_guard_that_fails_before_the_last_iteration_keeps_the_loop():
    # padding-like (x >= 1 fails at the front) and one failing at the last two iterations
    for cond in (lambda x: x >= 1, lambda x: x < 6):
        loop = _guarded_loop(cond)
        assert partition_loops(loop) is loop
    peeled = partition_loops(_guarded_loop(lambda x: x < 7))
    assert isinstance(peeled, SeqStmt) and int(peeled.seq[0].extent.value) == 7
    assert not collect(peeled, lambda x: isinstance(x, IfThenElse))  # the tail's is false


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 23), factor=st.integers(2, 9))
def test_random_splits_match_numpy(n, factor):
    s, args = _blocked(n, factor)
    body = templtune.lower(s, args).body
    loops = _outer_loops(body)
    blocks = -(-n // factor)
    if n % factor and blocks > 1:
        assert [int(f.extent.value) for f in loops] == [blocks - 1]
    _check_numpy(s, args, n)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_peeled_kernels_match_numpy_on_each_isa(target):
    s, args = _blocked(49, 6)
    _check_numpy(s, args, 49, target)


def test_the_peeled_copy_keeps_the_loops_of_extent_one():
    # bound inference gives an extent-1 loop's variable a one-point range; the copy's cleanup
    # once replaced it by its value in the loop's binding too ("for 0 in ...", found by
    # test_lower_property on a cache stage's batch loop)
    x, j = te.var("x"), te.var("j")
    buf = Buffer("out", (const(8),), "float32")
    guarded = IfThenElse(Call("bool", "likely", (x * 3 + j < 6,)),
                         Store(buf, x * 3 + j, const(1.0, "float32")))
    inner = For(j, const(0), const(1), ForKind.SERIAL,
                SeqStmt((Store(buf, x + j, const(2.0, "float32")), guarded)))
    loop = For(x, const(0), const(3), ForKind.SERIAL, inner)
    peeled = partition_loops(loop, {j: (0, 0)})
    assert isinstance(peeled, SeqStmt)
    bound = [f.loop_var for f in collect(peeled, lambda n: isinstance(n, For))]
    assert all(isinstance(v, te.Var) for v in bound) and j in bound
