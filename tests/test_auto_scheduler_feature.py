"""auto_scheduler per-store features: layout, hand-counted values, failures, cache, pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from templtune import auto_scheduler as auto
from templtune import te, topi
from templtune.auto_scheduler import feature as F
from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
from templtune.auto_scheduler.measure_record import RecordState, RecordTask
from templtune.auto_scheduler.transform_step import SplitStep


def log2p(x: float) -> float:
    return math.copysign(math.log2(abs(x) + 1), x)


def matmul(m: int, n: int, k: int) -> list:
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return [a, b, c]


class _Task:
    """The parts of a SearchTask the features read."""

    def __init__(self, tensors: list, target: str = "llvm") -> None:
        self.compute_dag = auto.ComputeDAG(tensors)
        self.target = target
        self.workload_key = self.compute_dag.workload_key()


def rows(task: _Task, state, max_n_bufs=None) -> list[dict[str, float]]:
    names = F.get_per_store_feature_names(max_n_bufs)
    x = F.get_per_store_features_from_states([state], task, max_n_bufs)[0]
    return [dict(zip(names, r.tolist())) for r in x]


def buf(row: dict[str, float], kind: str) -> dict[str, float]:
    """The buffer block whose access type is ``kind`` (read/write/rw) and has the most bytes;
    ``kind`` may also pick the k-th read with ``read:k``."""
    kind, _, nth = kind.partition(":")
    blocks = [{f.split(".", 1)[1]: v for f, v in row.items() if f.startswith(f"B{k}.")}
              for k in range(F.DEFAULT_MAX_N_BUFS)]
    hits = [b for b in blocks if b[f"acc_type.{kind}"] == 1.0]
    return hits[int(nth or 0)]


def test_names_and_width() -> None:
    names = F.get_per_store_feature_names()
    assert len(names) == 146 == len(set(names))
    for k in (1, 3, 8):
        assert len(F.get_per_store_feature_names(k)) == 39 + 18 * k + 17
    assert names[:3] == ["float_addsub", "float_mul", "float_divmod"]
    assert names[-3:] == ["outer_prod", "num_loops", "auto_unroll_max_step"]


def test_naive_matmul_hand_counts_and_determinism() -> None:
    m, n, k = 16, 24, 8
    task = _Task(matmul(m, n, k))
    init = task.compute_dag.get_init_state()
    init_row, upd = rows(task, init)
    # the reduction's update: one multiply and one add per (i, j, k)
    assert upd["float_mul"] == pytest.approx(log2p(m * n * k), abs=1e-5)
    assert upd["float_addsub"] == pytest.approx(log2p(m * n * k), abs=1e-5)
    assert upd["float_divmod"] == upd["float_mathfunc"] == 0.0
    assert init_row["float_mul"] == 0.0 and init_row["outer_prod"] == pytest.approx(
        log2p(m * n), abs=1e-5)
    c, a, b = buf(upd, "rw"), buf(upd, "read:0"), buf(upd, "read:1")
    if a["unique_bytes"] != pytest.approx(log2p(m * k * 4), abs=1e-5):
        a, b = b, a
    for blk in (a, b, c):
        assert blk["bytes"] == pytest.approx(log2p(m * n * k * 4), abs=1e-5)
    assert a["unique_bytes"] == pytest.approx(log2p(m * k * 4), abs=1e-5)
    assert b["unique_bytes"] == pytest.approx(log2p(k * n * 4), abs=1e-5)
    assert c["unique_bytes"] == pytest.approx(log2p(m * n * 4), abs=1e-5)
    # C[i, j] is re-read along the innermost k loop: reuse count K at distance 1
    assert c["reuse_type.loop"] == 1.0 and c["reuse_ct"] == pytest.approx(log2p(k), abs=1e-5)
    assert c["reuse_dis_iter"] == pytest.approx(log2p(1), abs=1e-5)
    # A[i, k] does not move along j: reused N times, K iterations apart
    assert a["reuse_ct"] == pytest.approx(log2p(n), abs=1e-5)
    assert a["reuse_dis_iter"] == pytest.approx(log2p(k), abs=1e-5)
    # B[k, j] moves by N elements per k step: every access a new 64-byte line
    assert b["stride"] == pytest.approx(log2p(n), abs=1e-5)
    assert b["lines"] == pytest.approx(log2p(m * n * k), abs=1e-5)
    # deterministic: recomputed without the cache, the same values
    F._CACHES.clear()
    assert rows(task, init) == [init_row, upd]


def test_conv2d_counts_and_sliding_window_footprint() -> None:
    n, ci, h, w, co, kh, kw = 1, 3, 8, 8, 4, 3, 3
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, (1, 1), (1, 1), 1)
    task = _Task([data, kernel, out])
    rs = rows(task, task.compute_dag.get_init_state())
    conv = [r for r in rs if r["float_mul"] > 0]
    assert len(conv) == 1
    conv_row = conv[0]
    assert conv_row["float_mul"] == pytest.approx(log2p(n * co * h * w * ci * kh * kw),
                                                  abs=1e-5)
    # the padded input: the 3x3 windows of stride 1 cover all (h+2) x (w+2) padded pixels once
    pad = max((buf(conv_row, f"read:{k}") for k in range(2)), key=lambda b: b["lines"])
    sizes = sorted(buf(conv_row, f"read:{k}")["unique_bytes"] for k in range(2))
    assert sizes == pytest.approx(sorted([log2p(n * ci * (h + 2) * (w + 2) * 4),
                                          log2p(co * ci * kh * kw * 4)]), abs=1e-5)
    assert pad["reuse_type.loop"] == 1.0
    # the padding stage copies every padded pixel once (a select, no float arithmetic)
    pad_rows = [r for r in rs if r["select_op"] > 0]
    assert pad_rows and pad_rows[0]["select_op"] == pytest.approx(
        log2p(n * ci * (h + 2) * (w + 2)), abs=1e-5)


def test_tiled_loop_bytes_lines_and_annotations() -> None:
    a = te.placeholder((64, 64), name="A")
    b = te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="B")
    task = _Task([a, b])
    s = task.compute_dag.get_init_state()
    s = s.split(1, 0, [8]).split(1, 2, [16])  # i.0 i.1 j.0 j.1
    s = s.reorder(1, [0, 2, 1, 3]).fuse(1, [0, 1]).parallel(1, 0).vectorize(1, 2)
    (row,) = rows(task, s)
    assert row["float_mul"] == pytest.approx(log2p(64 * 64), abs=1e-5)
    for kind in ("read", "write"):
        blk = buf(row, kind)
        assert blk["bytes"] == pytest.approx(log2p(64 * 64 * 4), abs=1e-5)
        assert blk["unique_bytes"] == pytest.approx(log2p(64 * 64 * 4), abs=1e-5)
        # 16 consecutive floats = one 64-byte line
        assert blk["lines"] == pytest.approx(log2p(64 * 64 * 4 / 64), abs=1e-5)
        assert blk["unique_lines"] == pytest.approx(log2p(64 * 64 * 4 / 64), abs=1e-5)
        assert blk["stride"] == pytest.approx(log2p(1), abs=1e-5)
        assert blk["reuse_type.none"] == 1.0
    assert row["parallel_num"] == pytest.approx(log2p(1)) and row["parallel_outer"] == 1.0
    assert row["parallel_prod"] == pytest.approx(log2p(8 * 4), abs=1e-5)
    assert row["vec_len"] == pytest.approx(log2p(16), abs=1e-5) and row["vec_inner"] == 1.0
    assert row["num_loops"] == pytest.approx(log2p(3), abs=1e-5)


def test_tiled_matmul_reuse_matches_tvm_pinned_values() -> None:
    # TVM's pinned example (SPEC 6.10), at 64^3: i split by 16, j by 8, order i.0 j.0 k j.1 i.1
    nn = 64
    task = _Task(matmul(nn, nn, nn))
    s = task.compute_dag.get_init_state()
    s = s.split(2, 0, [16]).split(2, 2, [8])  # i.0 i.1 j.0 j.1 k
    s = s.reorder(2, [0, 2, 4, 3, 1]).vectorize(2, 3).parallel(2, 0).parallel(2, 1)
    s = s.unroll(2, 2)
    upd = rows(task, s)[-1]
    c = buf(upd, "rw")
    assert c["bytes"] == pytest.approx(log2p(nn ** 3 * 4), abs=1e-5)
    assert c["reuse_dis_iter"] == pytest.approx(log2p(8 * 16), abs=1e-5)
    assert c["reuse_dis_bytes"] == pytest.approx(log2p((8 * 16 + 8 + 16) * 4), abs=1e-5)
    assert c["reuse_ct"] == pytest.approx(log2p(nn), abs=1e-5)
    reads = [buf(upd, f"read:{k}") for k in range(2)]
    assert all(r["unique_bytes"] == pytest.approx(log2p(nn * nn * 4), abs=1e-5) for r in reads)
    assert upd["unroll_num"] == pytest.approx(log2p(1))
    assert upd["vec_num"] == pytest.approx(log2p(1))
    assert upd["parallel_num"] == pytest.approx(log2p(2))
    assert upd["parallel_prod"] == pytest.approx(log2p(nn * nn / 16 / 8), abs=1e-5)


def test_non_dividing_split_guard_narrows_the_loop() -> None:
    a = te.placeholder((100,), name="A")
    b = te.compute((100,), lambda i: a[i] + 1.0, name="B")
    task = _Task([a, b])
    s = task.compute_dag.get_init_state().split(1, 0, [16])  # 7 x 16 = 112 > 100
    (row,) = rows(task, s)
    # the guarded body runs 100 times, not 112
    assert row["float_addsub"] == pytest.approx(log2p(100), abs=0.05)
    assert row["float_addsub"] < log2p(112) - 0.05


def test_failed_lowering_gives_an_empty_array() -> None:
    task = _Task(matmul(8, 8, 8))
    width = len(F.get_per_store_feature_names())
    bad = RecordState((SplitStep(2, 7, 8, (2,), True),))  # iterator 7 does not exist
    good = task.compute_dag.get_init_state()
    out = F.get_per_store_features_from_states([bad, good], task)
    assert out[0].shape == (0, width) and out[0].dtype == np.float32
    assert out[1].shape == (2, width)
    # an unregistered workload of a record task: no DAG, empty arrays, no exception
    rt = RecordTask('["test_as_feature_no_such_workload", 1]', "llvm", (), "", 0, ())
    assert F.get_per_store_features_from_states([good], rt)[0].shape == (0, width)


def test_cache_returns_the_computed_array() -> None:
    task = _Task(matmul(8, 8, 8))
    st = task.compute_dag.get_init_state().split(2, 0, [4])
    x1 = F.get_per_store_features_from_states([st], task)[0]
    x2 = F.get_per_store_features_from_states([task.compute_dag.replay(st.transform_steps)],
                                              task)[0]
    assert x1 is x2
    # max_n_bufs is part of the key
    x3 = F.get_per_store_features_from_states([st], task, max_n_bufs=2)[0]
    assert x3.shape[1] == 39 + 18 * 2 + 17


def test_measure_pairs_normalise_per_task() -> None:
    t1, t2 = _Task(matmul(8, 8, 8)), _Task(matmul(4, 4, 4))
    s1, s2 = t1.compute_dag.get_init_state(), t2.compute_dag.get_init_state()
    inputs = [MeasureInput(t1, s1), MeasureInput(t2, s2), MeasureInput(t1, s1.split(2, 0, [2])),
              MeasureInput(t1, s1)]
    results = [MeasureResult((2.0,), 0, "", 0, 0), MeasureResult((3.0,), 0, "", 0, 0),
               MeasureResult((1.0,), 0, "", 0, 0), MeasureResult((1e10,), 4, "err", 0, 0)]
    feats, y, tid = F.get_per_store_features_from_measure_pairs(inputs, results,
                                                                skip_first_n_feature_extraction=1)
    assert tid.tolist() == [0, 1, 0, 0]
    np.testing.assert_allclose(y, [0.5, 1.0, 1.0, 1e-10])
    assert len(feats[0]) == 0 and len(feats[1]) == 2 and len(feats[2]) == 2


def test_gpu_states_count_each_thread_binding_once() -> None:
    m = n = k = 64
    task = auto.SearchTask(compute_dag=auto.ComputeDAG(matmul(m, n, k)), target="cuda")
    states = auto.SketchPolicy(task, seed=0, verbose=0).sample_initial_population(4)
    names = F.get_per_store_feature_names()
    for x in F.get_per_store_features_from_states(states, task):
        assert len(x) >= 3  # shared-memory fetches, the local accumulator, the write-back
        rs = [dict(zip(names, r.tolist())) for r in x]
        assert all(r["is_gpu"] == 1.0 for r in rs)
        # the cooperative fetches bind threadIdx.x again inside the kernel's thread loop: the
        # same threads, so every store of the kernel sees the same thread count
        threads = {round(r["threadIdx_x_len"], 6) for r in rs}
        assert len(threads) == 1 and 0 < threads.pop() <= log2p(1024)
        assert sum(r["float_mul"] == pytest.approx(log2p(m * n * k), abs=1e-5) for r in rs) == 1


def test_lines_count_a_split_contiguous_run_once() -> None:
    # j split by 4: j.1 covers 16 bytes, j.0 continues right after it, so the 64-byte lines
    # are fetched once each (not once per j.1 run)
    a = te.placeholder((64, 64), name="A")
    b = te.compute((64, 64), lambda i, j: a[i, j] + 1.0, name="B")
    task = _Task([a, b])
    (row,) = rows(task, task.compute_dag.get_init_state().split(1, 1, [4]))
    for kind in ("read", "write"):
        assert buf(row, kind)["lines"] == pytest.approx(log2p(64 * 64 * 4 / 64), abs=1e-5)
    # a transposed read (stride 64 along the inner loop) fetches a line per element
    c = te.compute((64, 64), lambda i, j: a[j, i] + 1.0, name="C")
    task_t = _Task([a, c])
    (row_t,) = rows(task_t, task_t.compute_dag.get_init_state())
    assert buf(row_t, "read")["lines"] == pytest.approx(log2p(64 * 64), abs=1e-5)
    assert buf(row_t, "read")["stride"] == pytest.approx(log2p(64), abs=1e-5)


def test_cache_is_bounded_over_all_dags(monkeypatch) -> None:
    monkeypatch.setattr(F, "CACHE_LIMIT", 10)
    t1, t2 = _Task(matmul(8, 8, 8)), _Task(matmul(8, 8, 4))
    s1, s2 = t1.compute_dag.get_init_state(), t2.compute_dag.get_init_state()
    states1 = [s1.split(2, 0, [f]) for f in (1, 2, 4, 8)] + [s1.split(2, 1, [f]) for f in (2, 4)]
    states2 = [s2.split(2, 0, [f]) for f in (1, 2, 4, 8)] + [s2.split(2, 1, [f]) for f in (2, 4)]
    x1 = F.get_per_store_features_from_states(states1, t1)
    x2 = F.get_per_store_features_from_states(states2, t2)
    assert sum(len(c) for c in F._CACHES.values()) <= 10
    F._CACHES.clear()
    for got, want in zip(x1 + x2, F.get_per_store_features_from_states(states1, t1)
                         + F.get_per_store_features_from_states(states2, t2)):
        np.testing.assert_array_equal(got, want)
