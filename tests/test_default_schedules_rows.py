"""Row-wise groups (softmax, layer norm, a reduction with kept axes and its consumer) under the
default CPU schedule: every stage is computed inside the output's parallel row loop.

Oracles: numpy (softmax, layer norm through the op's own reference, a centred row) and the
lowered loop IR (where each intermediate buffer is allocated, and how large it is).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_default_schedules import TARGET, _ir, _run

from templtune import te, topi
from templtune.graph.op import get_op
from templtune.topi.testing import softmax_python


def _rand(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype("float32")


def _allocations(ir: str) -> dict[str, int]:
    """Buffer name -> allocated elements, for every ``allocate`` in the lowered IR."""
    return {m[1]: int(np.prod([int(d) for d in m[2].split(",")]))
            for m in re.finditer(r"allocate\(([\w.]+): [^\]]*\[([\d, ]+)\]\)", ir)}


def _layer_norm(shape: tuple[int, ...], axis: int) -> tuple[list[te.Tensor], Any]:
    op = get_op("nn.layer_norm")
    x = te.placeholder(shape, name="x")
    g = te.placeholder(shape[axis:], name="gamma")
    b = te.placeholder(shape[axis:], name="beta")
    attrs = {"axis": axis, "epsilon": 1e-5}
    return [x, g, b, op.compute([x, g, b], attrs)], lambda *a: op.reference(list(a), attrs)


def _centred(shape: tuple[int, ...]) -> list[te.Tensor]:
    """``x - max(x, axis=-1, keepdims=True)``: a reduction whose reduced axis is kept."""
    x = te.placeholder(shape, name="x")
    k = te.reduce_axis((0, shape[-1]), name="k")
    mx = te.compute(shape[:-1] + (1,), lambda *i: te.max(x[i[:-1] + (k,)], axis=k), name="mx")
    return [x, te.compute(shape, lambda *i: x[i] - mx[i[:-1] + (0,)], name="centred")]


def test_softmax_rows_keep_their_intermediates_in_a_row_buffer() -> None:
    """At the root, ``exp`` was a whole-tensor buffer written and read twice more; per row it
    is one row, allocated inside the parallel loop."""
    x = te.placeholder((8, 9, 577), name="x")
    ir = _ir([x, topi.nn.softmax(x)])
    sizes = _allocations(ir)
    assert sizes["T_softmax_exp"] == 577
    assert sizes["T_softmax_maxelem.rf"] == sizes["T_softmax_expsum.rf"] == \
        TARGET.capabilities.lanes("float32")
    loop = ir.index('"parallel"')
    assert all(ir.index(f"allocate({name}:") > loop for name in sizes)
    assert ir.count("exp(") == 2  # the full vectors and the peeled tail, once per element


def test_layer_norm_rows_reduce_inside_the_row_loop() -> None:
    tensors, ref = _layer_norm((1, 197, 768), 2)
    ir = _ir(tensors)
    loop = ir.index('"parallel"')
    assert ir.index("allocate(T_ln_sum") > loop and ir.index("allocate(T_ln_var") > loop
    arrays = [_rand((1, 197, 768)), _rand((768,), 1), _rand((768,), 2)]
    np.testing.assert_allclose(_run(tensors, *arrays), ref(*arrays), rtol=1e-4, atol=1e-4)


def test_few_long_rows_keep_the_per_stage_schedule() -> None:
    """Three rows cannot feed the threads: each stage stays parallel over its own loops."""
    x = te.placeholder((3, 20000), name="x")
    y = topi.nn.softmax(x)
    ir = _ir([x, y])
    assert _allocations(ir)["T_softmax_exp"] == 3 * 20000
    a = _rand((3, 20000))
    np.testing.assert_allclose(_run([x, y], a), softmax_python(a, axis=-1), rtol=1e-5,
                               atol=1e-8)


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       last=st.sampled_from([1, 3, 8, 16, 31, 64, 197]),
       kind=st.sampled_from(["softmax", "layer_norm", "centred"]), data=st.data())
def test_row_wise_groups_match_numpy(rows: list[int], last: int, kind: str,
                                     data: st.DataObject) -> None:
    shape = (*rows, last)
    a = _rand(shape)
    if kind == "softmax":
        x = te.placeholder(shape, name="x")
        got, want = _run([x, topi.nn.softmax(x)], a), softmax_python(a, axis=-1)
    elif kind == "centred":
        got, want = _run(_centred(shape), a), a - a.max(axis=-1, keepdims=True)
    else:
        axis = data.draw(st.integers(1, len(shape) - 1), label="axis")
        tensors, ref = _layer_norm(shape, axis)
        g, b = _rand(shape[axis:], 1), _rand(shape[axis:], 2)
        got, want = _run(tensors, a, g, b), ref(a, g, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 8, 1), (64, 3)])
def test_centred_rows_reduce_over_the_kept_axis(shape: tuple[int, ...]) -> None:
    a = _rand(shape)
    np.testing.assert_allclose(_run(_centred(shape), a), a - a.max(axis=-1, keepdims=True))
