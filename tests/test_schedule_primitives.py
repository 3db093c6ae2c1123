"""Schedule structure (stages, leaves, relations, names) and every illegal request."""

from __future__ import annotations

import pytest

from templtune import te
from templtune.errors import ScheduleError
from templtune.schedule import Fuse, Schedule, Split, Stage


def matmul(n=16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_create_schedule_stages_and_lookup():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    assert isinstance(s, Schedule)
    assert [st.op.name for st in s.stages] == ["A", "B", "C", "D"]
    assert s[D] is s[D.op]
    assert isinstance(s[C], Stage)
    assert s.outputs == [D.op]
    assert te.create_schedule([D]).outputs == [D.op]


def test_split_names_extents_and_relations():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    xo, xi = s[C].split(i, factor=5)
    assert xo.var.name == "i.outer" and xi.var.name == "i.inner"
    assert int(xo.dom.extent) == 4 and int(xi.dom.extent) == 5
    yo, yi = s[C].split(j, nparts=3)
    assert int(yo.dom.extent) == 3 and int(yi.dom.extent) == 6
    rel = s[C].relations[0]
    assert isinstance(rel, Split) and rel.parent is i and rel.factor == 5
    assert s[C].leaf_iter_vars == [xo, xi, yo, yi, s[C].op.reduce_axis[0]]
    assert all(v in s[C].all_iter_vars for v in (i, j, xo, xi, yo, yi))


def test_tile_fuse_reorder():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 8)
    assert s[C].leaf_iter_vars[:4] == [xo, yo, xi, yi]
    f = s[C].fuse(xo, yo)
    assert f.var.name == "i.outer.j.outer.fused" and int(f.dom.extent) == 8
    assert isinstance(s[C].relations[-1], Fuse)
    (k,) = s[C].op.reduce_axis
    s[C].reorder(k, xi)
    assert s[C].leaf_iter_vars == [f, k, yi, xi]


def test_fuse_three_and_single():
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute((2, 3, 4), lambda a, b, c: A[a, b, c] * 2.0, name="B")
    s = te.create_schedule(B.op)
    x = s[B].fuse(*s[B].op.axis)
    assert int(x.dom.extent) == 24 and s[B].leaf_iter_vars == [x]
    assert s[B].fuse(x) is x


def test_annotations_recorded():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].parallel(i)
    s[C].vectorize(j)
    s[C].pragma(i, "auto_unroll_max_step", 16)
    attrs = s[C].iter_var_attrs
    assert attrs[i].kind.name == "PARALLELIZED" and attrs[j].kind.name == "VECTORIZED"
    assert attrs[i].pragmas == [("auto_unroll_max_step", 16)]
    tx = te.thread_axis("threadIdx.x")
    s[C].bind(j, tx)
    assert attrs[j].bind_thread is tx


def test_compute_at_attach_fields():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    i = s[C].op.axis[0]
    s[AA].compute_at(s[C], i)
    assert s[AA].attach_type == "scope"
    assert s[AA].attach_stage is s[C] and s[AA].attach_ivar is i
    assert s[AA].scope == "shared"
    assert [st.op.name for st in s.stages] == ["A", "A.shared", "B", "C"]


def test_cache_write_keeps_user_tensor_usable():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    assert CL.op.name == "C.local"
    assert [st.op.name for st in s.stages] == ["A", "B", "C.local", "C"]
    assert not s[C].op.reduce_axis and len(s[CL].op.reduce_axis) == 1
    assert s[C].op.axis[0].var.name == "i" and s[CL].op.axis[0].var.name == "i.c"


def test_rfactor_stages():
    A, B, C = matmul(512)
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], 16)
    CF = s.rfactor(C, ko)
    assert [int(d) for d in CF.shape] == [32, 512, 512]
    assert [st.op.name for st in s.stages] == ["A", "B", "C.rf", "C.repl"]
    assert [int(v.dom.extent) for v in s[CF].leaf_iter_vars] == [32, 512, 512, 16]
    assert [int(v.dom.extent) for v in s[C].leaf_iter_vars] == [512, 512, 32]


# ------------------------------------------------------------------------- illegal requests


def err(match):
    return pytest.raises(ScheduleError, match=match)


def test_reorder_foreign_axis():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    with err(r"stage C, axis i: cannot reorder: the axis does not belong"):
        s[C].reorder(s[D].op.axis[0], s[C].op.axis[0])


def test_fuse_foreign_axis():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    with err(r"stage D, axis j: cannot fuse"):
        s[D].fuse(s[D].op.axis[0], s[C].op.axis[1])


def test_fuse_non_adjacent():
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute((2, 3, 4), lambda a, b, c: A[a, b, c], name="B")
    s = te.create_schedule(B.op)
    a, b, c = s[B].op.axis
    with err(r"stage B, axis c: cannot fuse non-adjacent axes a and c"):
        s[B].fuse(a, c)
    with err(r"stage B, axis a: cannot fuse non-adjacent"):
        s[B].fuse(b, a)


def test_vectorize_reduction_axis():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], 4)
    with err(r"stage C, axis k.inner: cannot vectorize a reduction axis"):
        s[C].vectorize(ki)
    with err(r"stage C, axis k.outer: cannot parallel a reduction axis"):
        s[C].parallel(ko)


def test_compute_at_non_consumer():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: A[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    with err(r"stage B, axis i: cannot compute_at stage C: it does not read B"):
        s[B].compute_at(s[C], s[C].op.axis[0])
    # transitive consumers are fine
    E = te.compute((8,), lambda i: D[i] * 3.0, name="E")
    s2 = te.create_schedule(E.op)
    s2[B].compute_at(s2[E], s2[E].op.axis[0])


def test_compute_at_axis_not_leaf():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[0], 2)
    with err(r"stage C, axis i: cannot compute_at: the axis was already split"):
        s[B].compute_at(s[C], s[C].op.axis[0])


def test_inline_output_and_reduction():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    with err(r"stage D: cannot inline an output stage"):
        s[D].compute_inline()
    with err(r"stage C: cannot inline a reduction stage \(reduces over k\)"):
        s[C].compute_inline()


def test_bind_reduce_axis_to_blocks_is_refused():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with err(r"stage C, axis k: cannot bind a reduction axis to blockIdx.x \(only threadIdx"):
        s[C].bind(s[C].op.reduce_axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(s[C].op.reduce_axis[0], te.thread_axis("threadIdx.x"))  # cross-thread: allowed


def test_split_already_split():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i = s[C].op.axis[0]
    s[C].split(i, 4)
    with err(r"stage C, axis i: cannot split: the axis was already split or fused"):
        s[C].split(i, 2)


def test_bad_split_arguments():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i = s[C].op.axis[0]
    with err(r"stage C, axis i: split needs exactly one"):
        s[C].split(i)
    with err(r"stage C, axis i: split factor/nparts must be a positive int"):
        s[C].split(i, factor=0)


def test_bind_needs_thread_axis_and_placeholder_stage():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with err(r"bind needs a thread axis"):
        s[C].bind(s[C].op.axis[0], s[C].op.axis[1])
    with err(r"stage A: cannot split a placeholder"):
        s[A].split(s[C].op.axis[0], 2)


def test_reorder_duplicate_and_storage_align_checks():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    with err(r"reorder got the same axis twice"):
        s[C].reorder(i, i)
    with err(r"storage_align needs one of the op's data axes"):
        s[C].storage_align(s[C].op.reduce_axis[0], 4, 0)
    with err(r"0 <= offset < factor"):
        s[C].storage_align(i, 4, 4)


def test_cache_write_after_split_and_rfactor_errors():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[0], 4)
    with err(r"stage C: cache_write must come before split/fuse"):
        s.cache_write(C, "local")
    with err(r"stage C, axis i.outer: rfactor needs a reduction axis"):
        s.rfactor(C, s[C].leaf_iter_vars[0])
    D = te.compute((16,), lambda i: A[i, 0] + 1.0, name="D")
    s2 = te.create_schedule(D.op)
    with err(r"stage D: rfactor needs a reduction stage"):
        s2.rfactor(D, s2[D].op.axis[0])


def test_cache_read_reader_must_read_tensor():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    with err(r"stage D: cache_read reader does not read A"):
        s.cache_read(A, "shared", [D])


def test_compute_at_consumer_outside_scope_is_lowering_error():
    import templtune
    from templtune.errors import LoweringError

    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(LoweringError, match="consumer D is not inside that loop"):
        templtune.lower(s, [A, D])
