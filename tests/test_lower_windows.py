"""Window loads: a vectorized load whose lanes read constant offsets from lane 0's element
within at most as many elements as the vector has lanes (a grouped conv's per-group
broadcasts) becomes one contiguous load, masked past the window, and a
:class:`~templtune.lower.ir.Shuffle`. Checked against numpy through the LLVM build and the
loop-IR interpreter, the mask by a guard page after the buffer, the CUDA side by the emulator
and nvcc."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import templtune
from templtune import te
from templtune.errors import LoweringError
from templtune.lower.interp import run
from templtune.lower.ir import For, ForKind, Load, Ramp, Shuffle, Store
from templtune.lower.verify import verify
from templtune.te.functor import post_order

N = 64


def _lowered(index, lanes: int, n: int = N):
    """``B[i] = A[index(i)] * 2`` with ``i`` split by ``lanes`` and vectorized."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[index(i)] * 2.0, name="B")
    s = te.create_schedule(B.op)
    _, ii = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(ii)
    return s, A, B


def _nodes(f, kind):
    return [n for n in post_order(f.body) if isinstance(n, kind)]


def _check(index, lanes: int, want: np.ndarray):
    s, A, B = _lowered(index, lanes)
    f = templtune.lower(s, [A, B])
    verify(f)
    a = np.random.default_rng(0).standard_normal(N).astype("float32")
    for go in (run, templtune.build(s, [A, B], "llvm")):
        b = np.zeros(N, "float32")
        if go is run:
            go(f, a, b)
        else:
            arrays = [templtune.nd.array(a), templtune.nd.array(b)]
            go(*arrays)
            b = arrays[1].numpy()
        np.testing.assert_array_equal(b, a[want] * 2)
    return f, s, A, B


def test_one_group_per_vector_is_a_broadcast() -> None:
    f, *_ = _check(lambda i: i // 4 * 4 + 1, 4, np.arange(N) // 4 * 4 + 1)
    assert not _nodes(f, Shuffle)


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_group_broadcast_reads_one_masked_window(lanes, k) -> None:
    f, s, A, B = _check(lambda i: i // 4 * 4 + k, lanes, np.arange(N) // 4 * 4 + k)
    (sh,) = _nodes(f, Shuffle)
    assert sh.indices == tuple(j // 4 * 4 for j in range(lanes))
    load = sh.vector
    assert isinstance(load, Load) and isinstance(load.index, Ramp) and load.index.lanes == lanes
    assert load.predicate is not None  # lanes past the last group's element are masked off
    assert all(n.kind is not ForKind.SERIAL or n.loop_var.name != "i.inner"
               for n in _nodes(f, For))
    asm = templtune.build(s, [A, B], "llvm").get_source("asm")
    assert "gather" not in asm


_GUARD_PAGE = """
import ctypes, mmap, numpy as np, templtune
from templtune import te
N = 64
A = te.placeholder((N,), name="A")
B = te.compute((N,), lambda i: A[i // 4 * 4 + 3] * 2.0, name="B")
s = te.create_schedule(B.op)
_, ii = s[B].split(B.op.axis[0], factor=16)
s[B].vectorize(ii)
f = templtune.build(s, [A, B], "llvm")
page = mmap.PAGESIZE
buf = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(addr + page), page, 0) == 0
a = np.frombuffer(buf, dtype="float32", count=N, offset=page - 4 * N)
a[:] = np.arange(N, dtype="float32")
b = np.zeros(N, "float32")
f(a, b)
assert (b == a[np.arange(N) // 4 * 4 + 3] * 2).all()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="mprotect through ctypes")
def test_last_window_stays_inside_the_buffer() -> None:
    # A ends at a page that may not be read; its last window starts 3 elements before the
    # end: 13 lanes read, 3 masked (unmasked, the process dies of SIGSEGV)
    proc = subprocess.run([sys.executable, "-c", _GUARD_PAGE], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_permuted_window_needs_no_mask() -> None:
    f, *_ = _check(lambda i: i // 4 * 4 + 3 - i % 4, 16, np.arange(N) // 4 * 4 + 3 - np.arange(N) % 4)
    (sh,) = _nodes(f, Shuffle)
    assert sh.vector.predicate is None
    assert sorted(sh.indices) == list(range(16))


def test_repeated_pairs_window() -> None:
    # nearest-neighbour upsampling by 2: lanes [0, 0, 1, 1, ...] over half a vector
    f, *_ = _check(lambda i: i // 2, 8, np.arange(N) // 2)
    (sh,) = _nodes(f, Shuffle)
    assert sh.indices == (0, 0, 1, 1, 2, 2, 3, 3)


_I = np.arange(N)


@pytest.mark.parametrize("index,want", [
    (lambda i: i * 2 % N, _I * 2 % N),                          # stride 2: two vectors' span
    (lambda i: (i // 8 * 16 + i % 8) % N, (_I // 8 * 16 + _I % 8) % N),  # runs of 8, gaps
])
def test_wide_spans_are_not_windows(index, want) -> None:
    f, *_ = _check(index, 16, want)
    assert not _nodes(f, Shuffle)


def test_lane_wise_guard_gets_no_window() -> None:
    # a guard that varies across the lanes masks the loads by output lane: no window under it
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: te.if_then_else(i % 16 < 12, A[i // 4 * 4 + 1], 0.0),
                   name="B")
    s = te.create_schedule(B.op)
    _, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(ii)
    f = templtune.lower(s, [A, B])
    assert not _nodes(f, Shuffle)
    a = np.random.default_rng(1).standard_normal(N).astype("float32")
    i = np.arange(N)
    want = np.where(i % 16 < 12, a[i // 4 * 4 + 1], 0).astype("float32")
    b = np.zeros(N, "float32")
    run(f, a, b)
    np.testing.assert_array_equal(b, want)
    arrays = [templtune.nd.array(a), templtune.nd.array(np.zeros(N, "float32"))]
    templtune.build(s, [A, B], "llvm")(*arrays)
    np.testing.assert_array_equal(arrays[1].numpy(), want)


def test_verifier_rejects_a_lane_past_the_vector() -> None:
    s, A, B = _lowered(lambda i: i // 4 * 4, 8)
    f = templtune.lower(s, [A, B])
    (st,) = _nodes(f, Store)
    sh = next(n for n in post_order(st.value) if isinstance(n, Shuffle))
    bad = Shuffle(sh.vector, (0,) * 7 + (8,))
    from templtune.lower.ir import PrimFunc

    g = PrimFunc(f.name, f.params, _replace_value(f.body, st, bad), f.attrs)
    with pytest.raises(LoweringError, match="shuffle"):
        verify(g)


def _replace_value(body, store: Store, value):
    from templtune.te.functor import Mutator, handles

    class _R(Mutator):
        @handles(Store)
        def visit_Store(self, node: Store):
            return Store(node.buffer, node.index, value) if node is store else node

    return _R().visit(body)


def _gpu_window():
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i // 2 * 2 + 1] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    tx, vi = s[B].split(tx, factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(vi)
    return s, A, B


def test_cuda_window_is_emulated_and_rendered_per_lane() -> None:
    from templtune.runtime.cuda import build_cuda
    from templtune.runtime.cuda.emulate import emulate

    s, A, B = _gpu_window()
    f = templtune.lower(s, [A, B])
    assert _nodes(f, Shuffle)
    a = np.random.default_rng(2).standard_normal(N).astype("float32")
    b = np.zeros(N, "float32")
    emulate(f, a, b)
    np.testing.assert_array_equal(b, a[np.arange(N) // 2 * 2 + 1] * 2)
    src = build_cuda(f, "cuda", compile=False).get_source()
    # one store per lane, each reading its group's element, the window's mask folded away
    assert src.count("B[") == 4 and "?" not in src


@pytest.mark.cuda
def test_cuda_window_compiles_with_nvcc() -> None:
    from templtune.codegen.cuda.compile import compile_cuda

    s, A, B = _gpu_window()
    src = templtune.build(s, [A, B], target="cuda").get_source()
    assert compile_cuda(src)
