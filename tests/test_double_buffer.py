"""``Stage.double_buffer``: 2x buffer, prefetch of iteration ko + 1, one barrier per iteration.

Oracles: numpy on the lockstep (race-checking) and LLVM CUDA emulations and on the CPU backend,
nvcc on the generated source.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

import templtune
from templtune import te
from templtune.codegen.cuda.build import lower_to_kernels
from templtune.codegen.cuda.compile import find_nvcc
from templtune.codegen.cuda.sync import is_barrier
from templtune.errors import LoweringError, ScheduleError
from templtune.lower.ir import Evaluate, For, SeqStmt, seq
from templtune.runtime.cuda.emulate import RaceError, emulate, run_kernels
from templtune.runtime.cuda.host_emulate import emulate_llvm
from templtune.runtime.cuda.module import build_cuda
from templtune.te.functor import Mutator, handles, post_order

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TEMPLTUNE_CUDA_CACHE", str(tmp_path_factory.getbasetemp() / "cuda"))


def _matmul(m, n, k):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return a, b, c


def gpu_matmul(m, n, k, t=4, bk=4, db=True, vt=1, unroll=0, explicit=0):
    """Shared tiles of A and B fetched cooperatively at ko (TVM's dense_large_batch layout):
    a ``t x t`` thread block, ``vt`` virtual threads along the rows, a k-slice of ``bk``,
    the unroll pragmas on the outermost axis."""
    a, b, c = _matmul(m, n, k)
    s = te.create_schedule(c.op)
    aa, bb = s.cache_read(a, "shared", [c]), s.cache_read(b, "shared", [c])
    cl = s.cache_write(c, "local")
    i, j = s[c].op.axis
    by, i = s[c].split(i, factor=t * vt)
    vy, ty = s[c].split(i, nparts=vt)
    bx, tx = s[c].split(j, factor=t)
    s[c].reorder(by, bx, vy, ty, tx)
    thy, thx = te.thread_axis("threadIdx.y"), te.thread_axis("threadIdx.x")
    for ax, th in ((by, te.thread_axis("blockIdx.y")), (bx, te.thread_axis("blockIdx.x")),
                   (vy, te.thread_axis("vthread")), (ty, thy), (tx, thx)):
        s[c].bind(ax, th)
    s[cl].compute_at(s[c], tx)
    ko, ki = s[cl].split(s[cl].op.reduce_axis[0], factor=bk)
    for x in (aa, bb):
        s[x].compute_at(s[cl], ko)
        fused = s[x].fuse(*s[x].op.axis)
        f1, fused = s[x].split(fused, nparts=t)
        f2, fused = s[x].split(fused, nparts=t)
        s[x].bind(f1, thy)
        s[x].bind(f2, thx)
        if db:
            s[x].double_buffer()
    if unroll:
        s[c].pragma(by, "auto_unroll_max_step", unroll)
        s[c].pragma(by, "unroll_explicit", explicit)
    return s, [a, b, c]


def _arrays(m, n, k, rng):
    return [rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32),
            np.zeros((m, n), np.float32)]


def _check_emulated(func, m, n, k, seed_=0):
    for run in (emulate, emulate_llvm):  # lockstep with race checks, then the LLVM emulation
        x, y, z = _arrays(m, n, k, np.random.default_rng(seed_))
        run(func, x, y, z)
        np.testing.assert_allclose(z, x @ y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,n,k,t,bk,vt", [
    (8, 8, 16, 4, 4, 1),    # 4 iterations
    (8, 12, 10, 4, 4, 1),   # k not a multiple of the k-slice: guarded last tile
    (4, 4, 3, 4, 4, 1),     # a trip count of 1: the unit loop and its double buffer vanish
    (16, 8, 9, 4, 2, 2),    # virtual threads, odd trip count
    (6, 6, 7, 2, 3, 1),     # m, n not multiples of the block either
])
def test_cuda_matmul_double_buffered_matches_numpy(m, n, k, t, bk, vt):
    s, args = gpu_matmul(m, n, k, t=t, bk=bk, vt=vt)
    _check_emulated(templtune.lower(s, args), m, n, k)


def _loop_body(src, var="k_outer"):
    start = src.index(f"for (int {var}")
    return src[start:src.index("for (int k_inner", start)]


def test_source_has_2x_buffer_parity_prefetch_and_one_barrier_per_iteration():
    s, args = gpu_matmul(8, 8, 16)
    src = build_cuda(templtune.lower(s, args), compile=False).get_source()
    # a 4x4 tile of each operand, twice
    assert "__shared__ float A_shared[32];" in src and "__shared__ float B_shared[32];" in src
    body = _loop_body(src)
    assert body.count("__syncthreads();") == 1
    # the prefetch writes half (ko + 1) % 2 of the tile of ko + 1, guarded by ko + 1 < 4
    assert "if (((k_outer + 1) < 4))" in body
    assert re.search(r"A_shared\[.*\(\(k_outer \+ 1\) % 2\) \* 16\)\)\] = A\[", body)
    assert re.search(r"B_shared\[.*\(\(k_outer \+ 1\) % 2\) \* 16\)\)\] = B\[", body)
    # the compute reads half ko % 2
    assert "A_shared[(((((int)threadIdx.y) * 4) + k_inner) + ((k_outer % 2) * 16))]" in src
    # the prologue fills half 0 before the loop, with one barrier after it
    head = src[:src.index("for (int k_outer")]
    assert "A_shared[((((int)threadIdx.y) * 4) + ((int)threadIdx.x))] = A[" in head
    assert head.count("__syncthreads();") == 1
    # without double_buffer: a single tile and two barriers per iteration
    s0, args0 = gpu_matmul(8, 8, 16, db=False)
    plain = build_cuda(templtune.lower(s0, args0), compile=False).get_source()
    assert "__shared__ float A_shared[16];" in plain
    assert _loop_body(plain).count("__syncthreads();") == 2


class _DropLoopBarriers(Mutator):
    """Remove the barriers of the k.outer loop's body (the prologue's barrier stays)."""

    @handles(For)
    def visit_For(self, node):
        node = self.generic(node)
        if node.loop_var.name != "k.outer" or not isinstance(node.body, SeqStmt):
            return node
        return replace(node, body=seq(*[c for c in node.body.seq if not is_barrier(c)]))


def test_the_one_barrier_per_iteration_is_needed():
    """The race detector flags the double-buffered kernel without its loop's barrier."""
    m, n, k = 8, 8, 16
    s, args = gpu_matmul(m, n, k)
    func = templtune.lower(s, args)
    kernels, workspace = lower_to_kernels(func)
    dropped = [replace(kr, body=_DropLoopBarriers().visit(kr.body)) for kr in kernels]
    assert sum(_barriers(kr.body) for kr in kernels) == 2
    assert sum(_barriers(kr.body) for kr in dropped) == 1
    with pytest.raises(RaceError):
        run_kernels(dropped, func.params, workspace, _arrays(m, n, k, np.random.default_rng(0)),
                    True)


def _barriers(stmt):
    return sum(1 for x in post_order(stmt) if isinstance(x, Evaluate) and is_barrier(x))


@pytest.mark.cuda
@needs_nvcc
def test_double_buffered_kernel_compiles_with_nvcc():
    s, args = gpu_matmul(16, 8, 9, t=4, bk=2, vt=2)
    m = build_cuda(templtune.lower(s, args))
    assert m.binary and m.binary[:4] == b"\x7fELF"


@seed(18)
@settings(max_examples=8, deadline=None)
@given(t=st.sampled_from([2, 4]), bk=st.integers(1, 5), k=st.integers(1, 13),
       mt=st.integers(1, 2), vt=st.sampled_from([1, 2]), unroll=st.sampled_from([0, 16, 512]),
       explicit=st.sampled_from([0, 1]))
def test_property_tile_sizes_match_numpy_race_free(t, bk, k, mt, vt, unroll, explicit):
    m, n = t * vt * mt, t * 2
    s, args = gpu_matmul(m, n, k, t=t, bk=bk, vt=vt, unroll=unroll, explicit=explicit)
    _check_emulated(templtune.lower(s, args), m, n, k, seed_=bk * 10 + k)


# ------------------------------------------------------------------------------- CPU (LLVM)


def cpu_matmul(m, n, k, bk=4, db=True):
    a, b, c = _matmul(m, n, k)
    s = te.create_schedule(c.op)
    aa = s.cache_read(a, "global", [c])
    ko, ki = s[c].split(s[c].op.reduce_axis[0], factor=bk)
    s[c].reorder(ko, *s[c].op.axis, ki)
    s[aa].compute_at(s[c], ko)
    if db:
        s[aa].double_buffer()
    return s, [a, b, c]


@pytest.mark.parametrize("m,n,k,bk", [(5, 7, 12, 4), (3, 4, 10, 4), (2, 3, 3, 4)])
def test_llvm_double_buffered_matmul_matches_numpy(m, n, k, bk):
    s, args = cpu_matmul(m, n, k, bk)
    text = str(templtune.lower(s, args))
    many = k > bk  # with one k-slice the attach loop vanishes, and the double buffer with it
    per_tile = m * min(bk, k)
    assert re.search(rf"allocate\(A.global: .*\[{(2 if many else 1) * per_tile}\]\)", text)
    assert ("double_buffer_write" in text) == many
    mod = templtune.build(s, args, target="llvm")
    x, y, z = _arrays(m, n, k, np.random.default_rng(3))
    mod(x, y, z)
    np.testing.assert_allclose(z, x @ y, rtol=1e-5)


# ----------------------------------------------------------------------------------- misuse


def test_double_buffer_at_root_is_refused_naming_the_stage():
    a, b, c = _matmul(4, 4, 4)
    s = te.create_schedule(c.op)
    aa = s.cache_read(a, "global", [c])
    s[aa].double_buffer()
    with pytest.raises(LoweringError, match=r"stage A\.global: double_buffer needs .* root"):
        templtune.lower(s, [a, b, c])


def test_double_buffer_of_an_inlined_stage_is_refused():
    a = te.placeholder((4, 4), name="A")
    p = te.compute((4, 4), lambda i, j: a[i, j] * 2, name="P")
    q = te.compute((4, 4), lambda i, j: p[i, j] + 1, name="Q")
    s = te.create_schedule(q.op)
    s[p].compute_inline()
    s[p].double_buffer()
    with pytest.raises(LoweringError, match="stage P: .* inlined"):
        templtune.lower(s, [a, q])


def test_double_buffer_of_an_output_is_refused():
    a, b, c = _matmul(4, 4, 4)
    s = te.create_schedule(c.op)
    with pytest.raises(ScheduleError, match="stage C: cannot double_buffer an output"):
        s[c].double_buffer()


def test_double_buffer_under_thread_loops_only_is_refused():
    """Attached at a thread-bound loop with no serial loop around it: nothing to prefetch."""
    a, b, c = _matmul(4, 4, 4)
    s = te.create_schedule(c.op)
    aa = s.cache_read(a, "shared", [c])
    i, j = s[c].op.axis
    s[c].bind(i, te.thread_axis("blockIdx.x"))
    s[c].bind(j, te.thread_axis("threadIdx.x"))
    s[aa].compute_at(s[c], i)
    s[aa].double_buffer()
    with pytest.raises(LoweringError, match="stage A.shared: double_buffer needs .* loop"):
        templtune.lower(s, [a, b, c])


def test_double_buffer_in_a_parallel_loop_is_refused():
    a, b, c = _matmul(4, 4, 4)
    s = te.create_schedule(c.op)
    aa = s.cache_read(a, "global", [c])
    i, _ = s[c].op.axis
    s[c].parallel(i)
    s[aa].compute_at(s[c], i)
    s[aa].double_buffer()
    with pytest.raises(LoweringError, match="stage A.global: .* parallel"):
        templtune.lower(s, [a, b, c])


def test_prefetch_of_a_stage_computed_in_the_same_loop_is_refused():
    """The prefetch of ko + 1 would read P's tile of ko (TVM computes garbage here)."""
    a, b, _ = _matmul(4, 4, 8)
    p = te.compute((4, 8), lambda i, j: a[i, j] * 2, name="P")
    r = te.reduce_axis((0, 8), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(p[i, r] * b[r, j], axis=r), name="C")
    s = te.create_schedule(c.op)
    pp = s.cache_read(p, "global", [c])
    ko, ki = s[c].split(s[c].op.reduce_axis[0], factor=4)
    s[c].reorder(ko, *s[c].op.axis, ki)
    s[p].compute_at(s[c], ko)
    s[pp].compute_at(s[c], ko)
    s[pp].double_buffer()
    with pytest.raises(LoweringError, match="stage P.global: .* reads P, which is computed"):
        templtune.lower(s, [a, b, c])


def test_one_thread_block_keeps_its_thread_loops_bound_to_variables():
    # t = 1: every thread index has the range (0, 0); the pass's simplification once bound
    # the constant 0 as the loops' variable, which the IR printer could not print
    s, args = gpu_matmul(4, 4, 8, t=1, bk=2)
    func = templtune.lower(s, args)
    assert '"threadIdx.x"' in str(func)
    _check_emulated(func, 4, 4, 8)
