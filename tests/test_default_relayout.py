"""The default schedule of NCHW <-> NCHW[x]c layout transforms (graph/default_relayout.py) and
the loops it leaves to LLVM's vectorizer (lower/vectorize.py).

Oracles: the graph's numpy packing (``transform_array``) on blocks of 3 to 32 channels,
padded and not, on the host's target and an AVX2 one; the lowered loop kinds; the x86
assembly (no gathers where the lanes are interleaved).
"""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te
from templtune.graph.default_relayout import INTERLEAVE_MAX
from templtune.graph.default_schedules import default_schedule
from templtune.graph.ops.nchwc import _lt_compute, transform_array
from templtune.lower.ir import For, ForKind
from templtune.target import Target
from templtune.te.expr import PrimExpr
from templtune.te.functor import children

TARGETS = ["llvm", "llvm -mcpu=haswell"]


def _for_kinds(stmt: object) -> list[ForKind]:
    """The kinds of the loops in ``stmt``, outermost first."""
    out: list[ForKind] = []
    stack = [stmt]
    while stack:
        n = stack.pop()
        if isinstance(n, For):
            out.append(n.kind)
        stack.extend(reversed([c for c in children(n) if not isinstance(c, PrimExpr)]))
    return out

#: (source shape, source layout, destination layout, channels attribute)
CASES = [
    ((1, 3, 20, 24), "NCHW", "NCHW3c", 0),  # a stem's RGB input
    ((1, 16, 7, 9), "NCHW", "NCHW4c", 0),
    ((2, 24, 6, 13), "NCHW", "NCHW8c", 0),
    ((1, 32, 5, 16), "NCHW", "NCHW16c", 0),
    ((1, 64, 4, 11), "NCHW", "NCHW32c", 0),
    ((1, 58, 6, 10), "NCHW", "NCHW8c", 58),  # padded past the channels (ShuffleNet's)
    ((1, 116, 5, 6), "NCHW", "NCHW32c", 116),
    ((1, 3, 7, 9, 8), "NCHW8c", "NCHW", 0),
    ((2, 2, 5, 12, 16), "NCHW16c", "NCHW", 0),
    ((1, 2, 3, 17, 32), "NCHW32c", "NCHW", 0),
    ((1, 8, 6, 6, 8), "NCHW8c", "NCHW", 58),  # a padded source: the generic schedule
]


def _transform(shape: tuple[int, ...], src: str, dst: str, channels: int
               ) -> tuple[te.Tensor, te.Tensor]:
    data = te.placeholder(shape, name="data")
    attrs = {"src_layout": src, "dst_layout": dst, **({"channels": channels} if channels else {})}
    return data, _lt_compute([data], attrs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1]}-{c[2]}-{c[0][1]}-{c[3]}")
def test_layout_transform_matches_numpy(case: tuple, target: str) -> None:
    shape, src, dst, channels = case
    data, out = _transform(shape, src, dst, channels)
    tgt = Target(target)
    f = templtune.build(default_schedule([data, out], tgt), [data, out], target=tgt)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    res = np.full(tuple(int(d) for d in out.shape), np.nan, "float32")
    f(x, res)
    np.testing.assert_array_equal(res, transform_array(x, src, dst, channels))


def _kinds(shape: tuple[int, ...], src: str, dst: str, target: str) -> list[ForKind]:
    data, out = _transform(shape, src, dst, 0)
    stmt = templtune.lower(default_schedule([data, out], Target(target)), [data, out],
                           simple_mode=True)
    return _for_kinds(stmt)


@pytest.mark.parametrize("block", [4, 8, 16, 32])
def test_rows_are_left_to_llvm_where_blocks_interleave(block: int) -> None:
    """The row loop stays VECTORIZED (LLVM's vectorizer) for blocks it interleaves well,
    serial otherwise; the lanes are unrolled (no loop of their own is left)."""
    for target in TARGETS:
        lanes = Target(target).capabilities.lanes("float32")
        kinds = _kinds((1, 2 * block, 4, 40), "NCHW", f"NCHW{block}c", target)
        interleaved = block <= INTERLEAVE_MAX or lanes <= 8
        assert kinds.count(ForKind.VECTORIZED) == int(interleaved), (target, kinds)
        assert ForKind.UNROLLED not in kinds, (target, kinds)


def test_interleaved_rows_load_without_gathers() -> None:
    data, out = _transform((1, 24, 8, 56), "NCHW", "NCHW8c", 0)
    tgt = Target("llvm")
    asm = templtune.build(default_schedule([data, out], tgt), [data, out],
                          target=tgt).get_source("asm")
    assert "gather" not in asm
    assert any(("%ymm" in ln or "%zmm" in ln) and "vmovups" in ln for ln in asm.splitlines())


def test_vectorize_leaves_a_loop_holding_an_unrolled_one_to_llvm() -> None:
    a = te.placeholder((4, 64, 3), name="a")
    b = te.compute((4, 3, 64), lambda i, k, j: a[i, j, k], name="b")
    for inner, vectorized in (("unroll", 1), ("serial", 0)):
        s = te.create_schedule(b.op)
        i, k, j = s[b].op.axis
        s[b].reorder(i, j, k)
        s[b].vectorize(j)
        if inner == "unroll":
            s[b].unroll(k)
        stmt = templtune.lower(s, [a, b], simple_mode=True)  # vectorize_loops ran in it
        kinds = _for_kinds(stmt)
        assert kinds.count(ForKind.VECTORIZED) == vectorized, (inner, kinds)
        f = templtune.build(s, [a, b], target="llvm")
        x = np.random.default_rng(1).standard_normal((4, 64, 3)).astype("float32")
        res = np.zeros((4, 3, 64), "float32")
        f(x, res)
        np.testing.assert_array_equal(res, x.transpose(0, 2, 1))
