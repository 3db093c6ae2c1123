"""A vectorized reduction axis (``Stage.vectorize_reduction``): ``x = x op e`` over the lanes
becomes a tree of shuffles (lower/vectorize.py ``_Vectorizer.reduction``). Oracle: numpy, through
LLVM and the loop-IR interpreter; the CUDA side by the emulator and nvcc; the default CPU
schedule's rfactor'd reductions (layer norm) use it."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te
from templtune.errors import ScheduleError
from templtune.lower.interp import run
from templtune.lower.ir import Shuffle
from templtune.lower.verify import verify
from templtune.te.functor import post_order

ROWS = 8

REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min)}


def _schedule(kind: str, lanes: int, cols: int, gpu: bool = False):
    """``B[i] = reduce_k A[i, k]``, ``k`` rfactor'd into ``lanes`` partials that ``B``'s
    stage combines over a vectorized reduction axis."""
    A = te.placeholder((ROWS, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((ROWS,), lambda i: REDUCERS[kind][0](A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=lanes)
    rf = s.rfactor(B, ki)
    s[B].vectorize_reduction(s[B].op.reduce_axis[0])
    if gpu:
        s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
        s[rf].compute_at(s[B], B.op.axis[0])
    return s, A, B


def _tree(f) -> list[Shuffle]:
    return [n for n in post_order(f.body) if isinstance(n, Shuffle)]


@pytest.mark.parametrize("kind", sorted(REDUCERS))
@pytest.mark.parametrize("lanes,cols", [(4, 12), (8, 40), (16, 96), (16, 50)])
def test_lane_tree_matches_numpy(kind: str, lanes: int, cols: int) -> None:
    s, A, B = _schedule(kind, lanes, cols)
    f = templtune.lower(s, [A, B])
    verify(f)
    # log2(lanes) halvings, each two shuffles; the last ones pick one lane
    assert sum(len(n.indices) == 1 for n in _tree(f)) == 2
    a = np.random.default_rng(0).standard_normal((ROWS, cols)).astype("float32")
    want = REDUCERS[kind][1](a.astype(np.float64), axis=1)
    b = np.zeros(ROWS, "float32")
    run(f, a, b)
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)
    mod = templtune.build(s, [A, B], "llvm")
    arrays = [templtune.nd.array(a), templtune.nd.array(np.zeros(ROWS, "float32"))]
    mod(*arrays)
    np.testing.assert_allclose(arrays[1].numpy(), want, rtol=1e-5, atol=1e-5)
    if kind != "sum":  # min and max are exact in any order: the same bits as the interpreter
        np.testing.assert_array_equal(arrays[1].numpy(), b)


def test_llvm_combines_lanes_in_halves() -> None:
    s, A, B = _schedule("sum", 16, 96)
    ll = templtune.build(s, [A, B], "llvm -mcpu=skylake-avx512").get_source("ll")
    # 16 -> 8 -> 4 -> 2 lanes, then one lane each from the last pair
    for half in (8, 4, 2):
        assert f"<{half} x i32>" in ll
    assert ll.count("extractelement <2 x float>") == 2


def test_lanes_not_a_power_of_two_stay_serial() -> None:
    s, A, B = _schedule("sum", 6, 24)
    f = templtune.lower(s, [A, B])
    assert not _tree(f)
    a = np.random.default_rng(1).standard_normal((ROWS, 24)).astype("float32")
    b = np.zeros(ROWS, "float32")
    run(f, a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def _loop(body_of, n: int = 8):
    """A hand-made ``VECTORIZED`` loop over ``n`` lanes: ``body_of(v, A, X, Out)``, ``A`` the
    input, ``X`` one accumulator element, ``Out`` an output row."""
    from templtune.lower.ir import Buffer, For, ForKind, PrimFunc
    from templtune.te.expr import Var, const

    A, X, Out = (Buffer(k, (const(s),), "float32") for k, s in (("A", n), ("X", 1), ("O", n)))
    v = Var("v", "int32")
    body = For(v, const(0), const(n), ForKind.VECTORIZED, body_of(v, A, X, Out))
    return PrimFunc("f", (A, X, Out), body), (A, X, Out)


def _run_loop(f, n: int = 8):
    from templtune.lower.vectorize import vectorize_loops

    a = np.arange(1, n + 1, dtype="float32")
    vec = _replace_body(f, vectorize_loops(f.body))
    outs = []
    for g in (f, vec):
        x, o = np.ones(1, "float32"), np.zeros(n, "float32")
        run(g, a, x, o)
        outs.append((x, o))
    return outs, _tree(vec)


def _replace_body(f, body):
    from templtune.te.functor import _replace

    return _replace(f, {"body": body})


def test_running_sum_stays_serial() -> None:
    """``X += A[v]; O[v] = X``: the store beside the update reads X between iterations."""
    from templtune.lower.ir import Load, SeqStmt, Store
    from templtune.te.expr import const

    def body(v, A, X, Out):
        x = Load(X, const(0))
        return SeqStmt((Store(X, const(0), x + Load(A, v)), Store(Out, v, Load(X, const(0)))))

    f, _ = _loop(body)
    (serial, vec), tree = _run_loop(f)
    assert not tree
    np.testing.assert_array_equal(vec[1], np.cumsum(np.arange(1, 9)) + 1)
    np.testing.assert_array_equal(vec[1], serial[1])


def test_update_reading_its_own_value_stays_serial() -> None:
    """``X = X + X * A[v]`` is no reduction of values read through the lanes."""
    from templtune.lower.ir import Load, Store
    from templtune.te.expr import const

    def body(v, A, X, Out):
        x = Load(X, const(0))
        return Store(X, const(0), x + Load(X, const(0)) * Load(A, v))

    f, _ = _loop(body)
    (serial, vec), tree = _run_loop(f)
    assert not tree
    np.testing.assert_array_equal(vec[0], serial[0])
    assert vec[0][0] == np.prod(1 + np.arange(1, 9, dtype=np.float64))


def test_vectorize_reduction_needs_a_reduction_axis() -> None:
    A = te.placeholder((ROWS,), name="A")
    B = te.compute((ROWS,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="needs a reduction axis"):
        s[B].vectorize_reduction(B.op.axis[0])
    k = te.reduce_axis((0, ROWS), name="k")
    C = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="cannot vectorize a reduction axis"):
        s[C].vectorize(k)


def test_layer_norm_default_schedule_reduces_in_a_tree() -> None:
    from templtune.graph.default_schedules import default_schedule_cpu
    from templtune.graph.ops.transform import _ln_compute, _ln_ref
    from templtune.target import Target

    a = te.placeholder((1, 7, 7, 96), name="a")
    g, b = te.placeholder((96,), name="g"), te.placeholder((96,), name="b")
    out = _ln_compute([a, g, b], {"axis": 3, "epsilon": 1e-6})
    tgt = Target("llvm -mcpu=skylake-avx512 -num-cores=1")
    s = default_schedule_cpu([a, g, b, out], tgt)
    assert len(_tree(templtune.lower(s, [a, g, b, out]))) > 0
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(t).astype("float32") for t in ((1, 7, 7, 96), (96,), (96,))]
    arrays = [templtune.nd.array(x) for x in xs] + [templtune.nd.array(np.zeros(xs[0].shape,
                                                                                 "float32"))]
    # NOTE: the schedule is the AVX-512 target's; its numbers are checked on the host's ISA
    templtune.build(s, [a, g, b, out], "llvm -num-cores=1")(*arrays)
    np.testing.assert_allclose(arrays[-1].numpy(), _ln_ref(xs, {"axis": 3, "epsilon": 1e-6}),
                               rtol=1e-4, atol=1e-4)


def test_cuda_lane_tree_is_emulated_and_rendered() -> None:
    from templtune.runtime.cuda import build_cuda
    from templtune.runtime.cuda.emulate import emulate

    s, A, B = _schedule("sum", 8, 40, gpu=True)
    f = templtune.lower(s, [A, B])
    assert _tree(f)
    a = np.random.default_rng(2).standard_normal((ROWS, 40)).astype("float32")
    b = np.zeros(ROWS, "float32")
    emulate(f, a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert "shuffle" not in build_cuda(f, "cuda", compile=False).get_source()


@pytest.mark.cuda
def test_cuda_lane_tree_compiles_with_nvcc() -> None:
    from templtune.codegen.cuda.compile import compile_cuda

    s, A, B = _schedule("max", 8, 40, gpu=True)
    assert compile_cuda(templtune.build(s, [A, B], target="cuda").get_source())
