"""GPU sketch rules CrossThreadReduction and SpecialComputeLocationGPU: sketch counts (spec §6.6
table) and sampled states that build for CUDA and match numpy in the emulator."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy
from templtune.auto_scheduler.transform_step import PragmaStep


def _policy(tensors: list, seed: int = 0) -> SketchPolicy:
    return SketchPolicy(SearchTask(compute_dag=ComputeDAG(tensors), target="cuda"), seed=seed,
                        verbose=0)


def matmul(n: int, m: int, k: int) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    return [a, b, te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")]


def min_last(rows: int, n: int) -> list:
    a = te.placeholder((rows, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    return [a, te.compute((rows,), lambda i: te.min(a[i, k], axis=k), name="B")]


def softmax(rows: int, n: int) -> list:
    a = te.placeholder((rows, n), name="A")
    return [a, topi.nn.softmax(a)]


def _has_ctr(state) -> bool:
    from templtune.auto_scheduler.sketch_gpu import has_cross_thread_reduction

    return any(has_cross_thread_reduction(state, k) for k in range(len(state.stages)))


@pytest.mark.parametrize("make,count,ctr", [
    (lambda: matmul(512, 512, 512), 1, 0),
    (lambda: matmul(8, 8, 512), 2, 1),
    (lambda: min_last(10, 1024), 2, 1),
    (lambda: softmax(2, 1024), 4, 3),
])
def test_gpu_sketch_counts(make, count, ctr):
    sk = _policy(make()).generate_sketches()
    assert len(sk) == count
    assert sum(_has_ctr(s) for s in sk) == ctr


def test_ctr_sketch_shape_matmul_small_space():
    sk = _policy(matmul(8, 8, 512)).generate_sketches()
    ctr = [s for s in sk if _has_ctr(s)]
    assert len(ctr) == 1
    c = ctr[0].stages[-1]
    assert [it.name for it in c.iters] == ["i", "j", "k.0", "k.1"]
    assert c.iters[-1].range == 32
    # no shared-memory cache reads on the cross-thread-reduction sketch
    assert [st.op_name for st in ctr[0].stages] == ["A", "B", "C"]


def test_ctr_fuses_into_softmax_consumer():
    sk = _policy(softmax(2, 1024)).generate_sketches()
    full = [s for s in sk if sum(has for has in (
        any(it.annotation == 6 and it.iter_kind == 1 for it in st.iters) for st in s.stages)) == 2]
    assert len(full) == 1
    s = full[0]
    names = [st.op_name for st in s.stages]
    es = names.index("T_softmax_expsum")
    norm = names.index("T_softmax_norm")
    assert s.attached_to(es) == (norm, 0)


def _small_unroll(dag, state):
    steps = [PragmaStep(x.stage_id, x.iter_id, "auto_unroll_max_step$16")
             if isinstance(x, PragmaStep) else x for x in state.transform_steps]
    return dag.replay(steps)


def _check_population(tensors, ref, n=3, seed=3, want_ctr=True):
    from templtune.runtime.cuda.emulate import run_module

    pol = _policy(tensors, seed=seed)
    pop = pol.sample_initial_population(n)
    assert pop
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
           for t in tensors[:-1]]
    expect = ref(*ins)
    seen_ctr = False
    for s in pop:
        seen_ctr |= _has_ctr(s)
        s = _small_unroll(pol.dag, s)
        sch, args = pol.dag.apply_steps_from_state(s, is_gpu=True)
        mod = templtune.build(sch, args, target="cuda")
        out = np.zeros(expect.shape, "float32")
        run_module(mod, [a.copy() for a in ins] + [out])
        np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5,
                                   err_msg=pol.dag.print_python_code_from_state(s))
    if want_ctr:
        assert seen_ctr


def test_sampled_min_reduction_states_match_numpy():
    _check_population(min_last(4, 256), lambda a: a.min(1), n=4)


def test_sampled_softmax_states_match_numpy():
    def ref(a):
        e = np.exp(a - a.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    _check_population(softmax(2, 128), ref, n=4)


def test_sampled_small_space_matmul_states_match_numpy():
    _check_population(matmul(4, 4, 256), lambda a, b: a @ b, n=4)


def test_sampled_ctr_state_compiles_with_nvcc():
    from templtune.codegen.cuda.compile import find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    pol = _policy(softmax(2, 128), seed=1)
    pop = [s for s in pol.sample_initial_population(4) if _has_ctr(s)]
    assert pop
    sch, args = pol.dag.apply_steps_from_state(_small_unroll(pol.dag, pop[0]), is_gpu=True)
    mod = templtune.build(sch, args, target="cuda")
    assert "red_buf" in mod.get_source() and mod.binary


CONST_ATTR = "auto_scheduler_simplify_const_tensor_indices"


def _winograd_data_pack(h: int = 8, ci: int = 32, m: int = 2):
    from templtune.topi.nn.winograd import winograd_transform_matrices
    from templtune.topi.utils import const_matrix

    alpha = m + 2
    nh = (h + m - 1) // m
    data = te.placeholder((1, h, h, ci), name="data")
    pad = topi.nn.pad(data, (0, 1, 1, 0), (0, 1 + alpha, 1 + alpha, 0), name="data_pad")
    _, b_np, _ = winograd_transform_matrices(m, 3, "float32")
    B = const_matrix(b_np, "B")
    tile = te.compute((alpha, alpha, nh * nh, ci), lambda e, u, p, c: pad[
        0, p // nh * m + e, p % nh * m + u, c], name="input_tile")
    ra = te.reduce_axis((0, alpha), name="r_a")
    rb = te.reduce_axis((0, alpha), name="r_b")
    dp = te.compute((alpha, alpha, nh * nh, ci), lambda e, u, p, c: te.sum(
        tile[ra, rb, p, c] * B[ra, e] * B[rb, u], axis=[ra, rb]), name="data_pack",
        attrs={CONST_ATTR: ["eps", "nu", "r_a", "r_b"]})

    def ref(d):
        padded = np.pad(d, ((0, 0), (1, 1 + alpha), (1, 1 + alpha), (0, 0)))
        t = np.zeros((alpha, alpha, nh * nh, ci), "float32")
        for p in range(nh * nh):
            y, x = p // nh * m, p % nh * m
            t[:, :, p, :] = padded[0, y:y + alpha, x:x + alpha, :]
        return np.einsum("abpc,ae,bu->eupc", t, b_np, b_np)

    return [data, dp], ref


def test_special_compute_location_gpu_sketch_and_state():
    tensors, ref = _winograd_data_pack()
    pol = _policy(tensors, seed=2)
    sk = pol.generate_sketches()
    assert len(sk) == 1
    names = [st.op_name for st in sk[0].stages]
    tile, pack = names.index("input_tile"), names.index("data_pack")
    # attached just before the first unrolled iterator of the const-tensor consumer
    at = sk[0].attached_to(tile)
    assert at is not None and at[0] == pack
    assert sk[0].stages[pack].iters[at[1] + 1].annotation == 1  # unroll
    _check_population(tensors, ref, n=2, seed=2, want_ctr=False)


def test_tune_ctr_workload_on_the_emulator_backend(monkeypatch, tmp_path):
    # end to end: sketches -> sampled states -> builder process -> CUDA runner (emulated)
    from templtune import auto_scheduler as auto

    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "emulator")
    task = SearchTask(compute_dag=ComputeDAG(softmax(2, 64)), target="cuda")
    log = str(tmp_path / "ctr.json")
    opt = auto.TuningOptions(num_measure_trials=3, num_measures_per_round=3, verbose=0,
                             measure_callbacks=[auto.RecordToFile(log)])
    task.tune(opt, search_policy=SketchPolicy(task, seed=0, verbose=0))
    inputs, results = zip(*auto.load_records(log))
    assert len(results) == 3 and all(int(r.error_no) == 0 for r in results)
