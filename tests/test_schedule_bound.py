"""Bound inference: regions of attached stages, thread relaxation by storage scope, extents."""

from __future__ import annotations

from templtune import te
from templtune.schedule import infer_bound


def _ext(br, s, t):
    info = br.infos[s[t]]
    return [info.ext[a] for a in info.op.axis]


def test_root_stage_covers_shape_and_leaf_extents():
    A = te.placeholder((10, 7), name="A")
    B = te.compute((10, 7), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], 4)
    f = s[B].fuse(xi, B.op.axis[1])
    br = infer_bound(s)
    info = br.infos[s[B]]
    assert _ext(br, s, B) == [10, 7]
    assert info.ext[xo] == 3 and info.ext[xi] == 4 and info.ext[f] == 28


def test_compute_at_shifted_window():
    A = te.placeholder((20,), name="A")
    B = te.compute((20,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((18,), lambda i: B[i] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[B].compute_at(s[C], xo)
    br = infer_bound(s)
    assert _ext(br, s, B) == [6]
    assert str(br.infos[s[B]].root_min[B.op.axis[0]]) == "(i.outer * 4)"


def _gpu(scope):
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, scope, [B])
    bx, tx = s[B].split(B.op.axis[0], 16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], tx)
    return s, AA


def test_shared_relaxes_threads_local_does_not():
    s, AA = _gpu("shared")
    br = infer_bound(s)
    assert _ext(br, s, AA) == [16, 64]  # all threads of the block
    s, AA = _gpu("local")
    br = infer_bound(s)
    assert _ext(br, s, AA) == [1, 64]  # only its own thread
    s, AA = _gpu("global")
    br = infer_bound(s)
    assert _ext(br, s, AA) == [64, 64]  # every block


def test_reduction_attach_region():
    n = 32
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    ko, ki = s[C].split(C.op.reduce_axis[0], 2)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[AA].compute_at(s[C], ko)
    br = infer_bound(s)
    assert _ext(br, s, AA) == [8, 2]
    mins = [str(br.infos[s[AA]].root_min[a]) for a in s[AA].op.axis]
    assert mins == ["(i.outer * 8)", "(k.outer * 2)"]


def test_unset_scope_is_inferred_from_thread_loops():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((64,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((64,), lambda i: C[i] - 1.0, name="D")
    s = te.create_schedule(D.op)
    bx, tx = s[D].split(D.op.axis[0], 16)
    s[D].bind(bx, te.thread_axis("blockIdx.x"))
    s[D].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].compute_at(s[D], tx)
    s[B].compute_at(s[D], bx)
    br = infer_bound(s)
    assert br.infos[s[C]].scope == "local" and _ext(br, s, C) == [1]
    assert br.infos[s[B]].scope == "shared" and _ext(br, s, B) == [16]
    assert br.infos[s[D]].scope == "global"
    s[C].set_scope("global")
    assert infer_bound(s).infos[s[C]].scope == "global"


def _tile_inside_tile():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    co, _ = s[C].split(C.op.axis[0], factor=4)
    bo, bi = s[B].split(B.op.axis[0], factor=8)  # wider than the 4 points B computes per co
    s[B].compute_at(s[C], co)
    return s, (A, C), (bo, bi)


def test_split_wider_than_its_region_is_tightened():
    # TVM's PassDownDomain: the factor part shrinks to the region, so no loop runs the full
    # factor behind a guard (which lowered a tiled GPU conv to hundreds of redundant fetches)
    import numpy as np

    import templtune

    s, (A, C), (bo, bi) = _tile_inside_tile()
    br = infer_bound(s)
    info = next(i for st, i in br.infos.items() if st.op.name == "B")
    assert info.ext[bi] == 4 and info.ext[bo] == 1
    text = str(templtune.lower(s, [A, C]))
    assert "likely" not in text
    f = templtune.build(s, [A, C], target="llvm")
    a = np.random.uniform(size=64).astype("float32")
    c = templtune.nd.array(np.zeros(64, "float32"))
    f(templtune.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), a * 2 + 1, rtol=1e-6)


def test_thread_bound_part_keeps_its_extent():
    s, _, (bo, bi) = _tile_inside_tile()
    next(st for st in s.stages if st.op.name == "B").bind(bi, te.thread_axis("threadIdx.x"))
    br = infer_bound(s)
    info = next(i for st, i in br.infos.items() if st.op.name == "B")
    assert info.ext[bi] == 8  # the launch fixes it; the guard skips the extra threads
