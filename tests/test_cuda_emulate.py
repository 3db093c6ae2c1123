"""The CPU emulator: numpy-checked results of GPU-bound loop IR and its race detector."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune.codegen.cuda import examples as ex
from templtune.codegen.cuda.emulate import EmulationError, RaceError, emulate, run_kernels
from templtune.codegen.cuda.module import build_cuda, lower_to_kernels
from templtune.codegen.cuda.sync import barrier, is_barrier, strip_barriers
from templtune.lower.ir import Buffer, For, ForKind, IfThenElse, Load, PrimFunc, SeqStmt, Store, seq
from templtune.te.expr import Var, const
from templtune.te.functor import Mutator

EXAMPLES = {
    "vector_add": lambda: ex.vector_add(n=300, threads=32),
    "matmul": lambda: ex.tiled_matmul(),
    "matmul_vthread_unrolled": lambda: ex.tiled_matmul(m=16, n=32, k=24, vt=2, unroll=16,
                                                       explicit=1),
    "matmul_pragma_unroll": lambda: ex.tiled_matmul(m=16, n=16, k=16, tile=4, vt=4, unroll=64),
    "copy_exp_float4": lambda: ex.vector_copy_exp(n=512),
    "copy_exp_misaligned": lambda: ex.vector_copy_exp(n=256, lanes=2, offset=3),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_match_numpy(name):
    func, make, ref = EXAMPLES[name]()
    args = make(np.random.default_rng(1))
    emulate(func, *args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5, atol=1e-5)


def test_module_emulate_same_as_func():
    func, make, ref = ex.tiled_matmul(vt=2)
    m = build_cuda(func, compile=False)
    args = make(np.random.default_rng(2))
    m.emulate(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5)


@pytest.mark.parametrize("name", ["matmul", "matmul_vthread_unrolled", "copy_exp_float4"])
def test_missing_barrier_is_a_race(name):
    func, make, _ = EXAMPLES[name]()
    args = make(np.random.default_rng(3))
    with pytest.raises(RaceError, match="read-after-write"):
        emulate(func, *args, insert_sync=False)


class _DropFirstBarrierInLoop(Mutator):
    """Remove the barrier at the top of the k loop (protects the tile from being overwritten)."""

    def visit_For(self, node):
        body = node.body
        if isinstance(body, SeqStmt) and is_barrier(body.seq[0]):
            return replace(node, body=seq(*body.seq[1:]))
        return self.generic(node)


def test_missing_write_after_read_barrier_is_a_race():
    func, make, _ = ex.tiled_matmul()
    kernels, ws = lower_to_kernels(func)
    assert sum(is_barrier(n) for n in _walk(kernels[0].body)) == 2
    broken = [replace(k, body=_DropFirstBarrierInLoop().visit(k.body)) for k in kernels]
    assert sum(is_barrier(n) for n in _walk(broken[0].body)) == 1
    args = make(np.random.default_rng(4))
    with pytest.raises(RaceError, match="write-after-read"):
        run_kernels(broken, func.params, ws, args)
    # without the race detector the lockstep emulation hides the bug: that is why it exists
    args = make(np.random.default_rng(4))
    run_kernels(broken, func.params, ws, args, check_races=False)
    stripped = [strip_barriers(k) for k in kernels]
    with pytest.raises(RaceError):
        run_kernels(stripped, func.params, ws, make(np.random.default_rng(4)))


def _walk(s):
    from templtune.te.functor import post_order

    return list(post_order(s))


def _one_block(body_fn, n=16):
    a = Buffer("A", (const(n),), "float32")
    b = Buffer("B", (const(n),), "float32")
    tx = Var("tx")
    return PrimFunc("f", (a, b), For(tx, const(0), const(n), ForKind.THREAD_BINDING,
                                     body_fn(a, b, tx), "threadIdx.x"))


def test_out_of_bounds_index_detected():
    f = _one_block(lambda a, b, tx: Store(b, tx, Load(a, tx + 1)))
    with pytest.raises(EmulationError, match=r"out-of-bounds access A\[16\]"):
        emulate(f, np.zeros(16, np.float32), np.zeros(16, np.float32))


def test_wrong_but_in_bounds_indexing_gives_wrong_answer():
    func, make, ref = ex.tiled_matmul()

    class _SwapShared(Mutator):  # read B_shared transposed: a plausible indexing bug
        def visit_Load(self, node):
            node = self.generic(node)
            if node.buffer.name == "B.shared":
                from templtune.te.expr import BinOp, BinOpKind

                i = node.index
                return replace(node, index=BinOp(BinOpKind.FLOORMOD, i * 8 + i // 8, const(64),
                                                 "int32"))
            return node

    bad = replace(func, body=_SwapShared().visit(func.body))
    args = make(np.random.default_rng(5))
    emulate(bad, *args)
    assert not np.allclose(args[-1], ref(*args), rtol=1e-3)


def test_barrier_in_divergent_code_detected():
    def body(a, b, tx):
        return IfThenElse(tx < 8, seq(Store(b, tx, Load(a, tx)), barrier()))

    with pytest.raises(RaceError, match="divergent"):
        run_kernels(*_kernels_of(_one_block(body)),
                    [np.zeros(16, np.float32), np.zeros(16, np.float32)])


def _kernels_of(f):
    kernels, ws = lower_to_kernels(f, insert_sync=False)
    return kernels, f.params, ws


def test_uninitialised_local_read_is_nan():
    loc = Buffer("L", (const(1),), "float32", "local")
    from templtune.lower.ir import Allocate

    f = _one_block(lambda a, b, tx: Allocate(loc, Store(b, tx, Load(loc, const(0)))))
    out = np.zeros(16, np.float32)
    emulate(f, np.zeros(16, np.float32), out)
    assert np.isnan(out).all()


@settings(max_examples=12, deadline=None)
@given(tile=st.sampled_from([2, 4]), vt=st.sampled_from([1, 2, 3]),
       kt=st.integers(1, 3), mt=st.integers(1, 2), unroll=st.sampled_from([0, 4, 64]),
       explicit=st.booleans())
def test_property_matmul_configs_match_numpy_race_free(tile, vt, kt, mt, unroll, explicit):
    m, n, k = tile * mt, tile * vt * 2, tile * kt
    func, make, ref = ex.tiled_matmul(m=m, n=n, k=k, tile=tile, vt=vt, unroll=unroll,
                                      explicit=int(explicit))
    args = make(np.random.default_rng(tile * 100 + vt))
    emulate(func, *args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ host (LLVM) emulation


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_host_emulation_matches_numpy(name):
    from templtune.codegen.cuda.host_emulate import emulate_llvm

    func, make, ref = EXAMPLES[name]()
    args = make(np.random.default_rng(6))
    emulate_llvm(func, *args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5, atol=1e-5)


def test_host_emulation_phases_follow_barriers():
    """Threads run one after another between barriers, so a kernel without its barriers
    computes garbage on the host too (and the lockstep emulator reports the race)."""
    from templtune.build_module import build
    from templtune.codegen.cuda.host_emulate import kernel_to_host

    func, make, ref = ex.tiled_matmul()
    kernels, _ = lower_to_kernels(func)
    good = make(np.random.default_rng(7))
    build(kernel_to_host(kernels[0]), target="llvm")(*good)
    np.testing.assert_allclose(good[-1], ref(*good), rtol=1e-5)
    bad = make(np.random.default_rng(7))
    build(kernel_to_host(strip_barriers(kernels[0])), target="llvm")(*bad)
    assert not np.allclose(bad[-1], ref(*bad), rtol=1e-3)


def test_host_emulation_of_seed_size_conv2d_configs():
    """Real seed shape (1x512x7x7, 3x3): the lockstep emulator is too slow here, LLVM is not."""
    import importlib

    from templtune import autotvm
    from templtune.codegen.cuda.host_emulate import emulate_llvm
    from templtune.lower.lower_api import lower
    from templtune.target import Target
    from templtune.topi.testing import conv2d_nchw_python

    importlib.import_module("templtune.templates.cuda.conv2d_nchw")
    task = autotvm.task.create("tutorial/conv2d_no_batching",
                               (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)), "cuda")
    rng = np.random.default_rng(0)
    data = rng.random((1, 512, 7, 7), dtype=np.float32)
    kernel = rng.random((512, 512, 3, 3), dtype=np.float32)
    ref = conv2d_nchw_python(data, kernel, (1, 1), (1, 1))
    for index in (786590, 428353):  # two configs that fit the GPU (from a seeded sample)
        with Target("cuda"):
            s, args = task.instantiate(task.config_space.get(index))
        out = np.zeros(ref.shape, np.float32)
        emulate_llvm(lower(s, args, "default_function"), data, kernel, out)
        np.testing.assert_allclose(out, ref, rtol=1e-3)
