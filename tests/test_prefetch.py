"""``Stage.prefetch``: what iteration ``var + offset`` reads is prefetched line by line at the
start of iteration ``var``, and the results do not change.

Oracles: numpy (through the loop-IR interpreter and the LLVM build), the reads themselves
(every element the next iteration reads lies on a prefetched line), the x86 assembly.
"""

from __future__ import annotations

import numpy as np
import pytest
from lower_schedules_helpers import check_matmul, matmul

import templtune
from templtune import te
from templtune.errors import LoweringError, ScheduleError
from templtune.lower.ir import Evaluate, For, Load
from templtune.lower.prefetch import LINE_BYTES
from templtune.te.expr import Call, IntImm, const
from templtune.te.functor import post_order, substitute
from templtune.te.simplify import Simplifier


def _value(e, env) -> int:
    v = Simplifier().visit(substitute(e, {k: const(x) for k, x in env.items()}))
    assert isinstance(v, IntImm), v
    return v.value


def _prefetch_loops(f) -> list[For]:
    return [n for n in post_order(f.body) if isinstance(n, For) and isinstance(n.body, Evaluate)
            and isinstance(n.body.value, Call) and n.body.value.name == "prefetch"]


def _tiled(factor: int, tensor: str, offset: int, parallel: bool = False):
    A, B, C = matmul(12, 10, 9)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=factor)
    if parallel:
        s[C].parallel(io)
    s[C].prefetch({"A": A, "B": B}[tensor], io, offset)
    return s, (A, B, C), io


@pytest.mark.parametrize("factor,tensor,offset,parallel", [
    (4, "A", 1, False), (3, "A", 2, False), (4, "B", 1, False), (5, "A", 1, True),
    (4, "A", -1, False)])
def test_results_unchanged_and_next_reads_on_prefetched_lines(factor, tensor, offset,
                                                               parallel):
    s, args, io = _tiled(factor, tensor, offset, parallel)
    f = check_matmul(s, *args)  # interpreter and LLVM build against numpy
    (loop,) = _prefetch_loops(f)
    outer = next(n for n in post_order(f.body) if isinstance(n, For) and loop in
                 post_order(n.body) and n.loop_var.name == io.var.name)
    load = loop.body.value.args[0]
    assert isinstance(load, Load) and load.buffer.name == tensor
    per_line = LINE_BYTES // 4
    n, kk, m = 12, 9, 10
    for it in range(_value(outer.extent, {})):
        lines = {_value(load.index, {outer.loop_var: it, loop.loop_var: k}) // per_line
                 for k in range(_value(loop.extent, {outer.loop_var: it}))}
        # the elements iteration it + offset reads (the split's guard drops rows past n)
        rows = [r for r in range((it + offset) * factor, (it + offset + 1) * factor)
                if 0 <= r < n] if tensor == "A" else range(kk)
        width = kk if tensor == "A" else m
        reads = {(r * width + c) // per_line for r in rows for c in range(width)}
        if 0 <= it + offset and (it + offset) * factor < n or tensor == "B":
            assert reads <= lines, (it, sorted(reads - lines))
        # no more lines than the reads' span covers
        assert len(lines) <= (factor * width if tensor == "A" else kk * m) // per_line + 2


def test_nested_marks_bound_only_the_body_reads():
    A, B, C = matmul(12, 10, 9)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].prefetch(A, io, 1)
    s[C].prefetch(A, ii, 2)  # inner: its prefetch of row ii + 2 reads nothing
    f = check_matmul(s, A, B, C)
    outer = next(n for n in _prefetch_loops(f) if io.var.name in n.loop_var.name)
    # rows 4 (io + 1) .. 4 (io + 1) + 3 of 9 floats: 36 elements, not up to the inner
    # mark's row 4 (io + 1) + 5
    assert _value(outer.extent, {}) == (4 * 9 - 1) // (LINE_BYTES // 4) + 2


def test_x86_code_prefetches_into_l2():
    n, k = 64, 256
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k,), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n,), lambda i: te.sum(A[i, r] * B[r], axis=r), name="C")
    s = te.create_schedule(C.op)
    io, _ = s[C].split(C.op.axis[0], factor=4)
    s[C].prefetch(A, io, 1)
    f = templtune.build(s, [A, B, C], target="llvm")
    asm = f.get_source("asm")
    assert "prefetcht1" in asm and "prefetcht0" not in asm
    (loop,) = _prefetch_loops(templtune.lower(s, [A, B, C]))
    # 4 rows of 256 floats: a step per line from the first, the last at the last element
    assert _value(loop.extent, {}) == (4 * k - 1) // (LINE_BYTES // 4) + 2
    a = np.random.default_rng(0).random((n, k), dtype=np.float32)
    b = np.random.default_rng(1).random(k, dtype=np.float32)
    c = np.empty(n, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_no_prefetch_without_the_primitive():
    A, B, C = matmul()
    assert not _prefetch_loops(templtune.lower(te.create_schedule(C.op), [A, B, C]))


def test_cuda_source_leaves_prefetches_out():
    from templtune.runtime.cuda.module import build_cuda

    A, B, C = matmul(64, 64, 8)
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].prefetch(A, tx, 1)
    src = build_cuda(templtune.lower(s, [A, B, C]), compile=False).get_source()
    assert "__global__" in src and "prefetch" not in src and "_pf" not in src  # nor its loop


def test_bad_requests_name_the_problem():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match="offset"):
        s[C].prefetch(A, io, 0)
    with pytest.raises(ScheduleError, match="tensor"):
        s[C].prefetch("A", io, 1)
    with pytest.raises(ScheduleError, match="prefetch"):
        s[C].prefetch(A, C.op.axis[0], 1)  # split: no longer a loop of the stage
    other = te.placeholder((4,), name="D")
    s[C].prefetch(other, io, 1)
    with pytest.raises(LoweringError, match="prefetch of D"):
        templtune.lower(s, [A, B, C])
