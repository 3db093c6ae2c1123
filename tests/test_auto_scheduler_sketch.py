"""auto_scheduler: sketch counts, initial population and mutations (built, checked vs numpy)."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy
from templtune.auto_scheduler.init_rules import factorizations
from templtune.auto_scheduler.mutation import (
    mutate_auto_unroll,
    mutate_compute_location,
    mutate_parallel,
    mutate_tile_size,
)
from templtune.auto_scheduler.search_task import HardwareParams
from templtune.topi.nn.winograd import winograd_transform_matrices
from templtune.topi.utils import const_matrix

HW4 = HardwareParams(4, 64, 64, 0, 0, 0, 0, 0)
CONST_ATTR = "auto_scheduler_simplify_const_tensor_indices"


def matmul(n: int, m: int, k: int, relu: bool = False) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    if relu:
        return [a, b, te.compute((n, m), lambda i, j: te.max(c[i, j], 0.0), name="D")]
    return [a, b, c]


def double_matmul(n: int) -> list:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    c = te.placeholder((n, n), name="C")
    k1 = te.reduce_axis((0, n), name="k")
    d = te.compute((n, n), lambda i, j: te.sum(a[i, k1] * b[k1, j], axis=k1), name="D")
    k2 = te.reduce_axis((0, n), name="k")
    e = te.compute((n, n), lambda i, j: te.sum(d[i, k2] * c[k2, j], axis=k2), name="E")
    return [a, b, c, e]


def conv_bias_relu(n, h, w, ci, co, k, stride, pad) -> list:
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, k, k), name="kernel")
    bias = te.placeholder((1, co, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, pad, 1)
    return [data, kernel, bias, topi.nn.relu(conv + bias)]


def winograd_nhwc(n, h, ci, co, m=2) -> list:
    """NHWC Winograd with a pre-transformed kernel and the const-tensor attributes (as TVM's
    auto_scheduler test workload)."""
    r = 3
    alpha = m + r - 1
    data = te.placeholder((n, h, h, ci), name="data")
    kpack = te.placeholder((alpha, alpha, co, ci), name="kernel_pack")
    nh = (h + m - 1) // m
    p_total = n * nh * nh
    pad = topi.nn.pad(data, (0, 1, 1, 0), (0, 1 + alpha, 1 + alpha, 0), name="data_pad")
    a_np, b_np, _ = winograd_transform_matrices(m, r, "float32")
    A = const_matrix(a_np, "A")
    B = const_matrix(b_np, "B")
    tile = te.compute((alpha, alpha, p_total, ci), lambda e, u, p, c: pad[
        p // (nh * nh), (p // nh) % nh * m + e, p % nh * m + u, c], name="input_tile")
    ra = te.reduce_axis((0, alpha), name="r_a")
    rb = te.reduce_axis((0, alpha), name="r_b")
    dpack = te.compute((alpha, alpha, p_total, ci), lambda e, u, p, c: te.sum(
        tile[ra, rb, p, c] * B[ra, e] * B[rb, u], axis=[ra, rb]), name="data_pack",
        attrs={CONST_ATTR: ["eps", "nu", "r_a", "r_b"]})
    rc = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute((alpha, alpha, p_total, co), lambda e, u, p, k: te.sum(
        dpack[e, u, p, rc] * kpack[e, u, k, rc], axis=rc), name="bgemm")
    ra2 = te.reduce_axis((0, alpha), name="r_a")
    rb2 = te.reduce_axis((0, alpha), name="r_b")
    inv = te.compute((m, m, p_total, co), lambda vh, vw, p, k: te.sum(
        bgemm[ra2, rb2, p, k] * A[ra2, vh] * A[rb2, vw], axis=[ra2, rb2]), name="inverse",
        attrs={CONST_ATTR: ["vh", "vw", "r_a", "r_b"]})
    out = te.compute((n, h, h, co), lambda b, y, x, k: inv[
        y % m, x % m, b * nh * nh + (y // m) * nh + x // m, k], name="conv2d_winograd")
    return [data, kpack, out]


def _policy(tensors: list, hw: HardwareParams = HW4, seed: int = 0) -> SketchPolicy:
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="llvm", hardware_params=hw)
    return SketchPolicy(task, seed=seed, verbose=0)


def _count(tensors: list) -> int:
    return len(_policy(tensors).generate_sketches())


def test_sketch_counts_cpu() -> None:
    assert _count(matmul(512, 512, 512)) == 3
    assert _count(matmul(8, 8, 512)) == 5
    assert _count(double_matmul(512)) == 9
    assert _count(conv_bias_relu(1, 56, 56, 512, 512, 3, 1, 1)) == 3
    x = te.placeholder((10, 1024), name="x")
    r = te.reduce_axis((0, 1024), name="r")
    assert _count([x, te.compute((10,), lambda i: te.min(x[i, r], axis=r), name="m")]) == 3
    x1 = te.placeholder((1, 1024), name="x")
    assert _count([x1, topi.nn.softmax(x1)]) == 9
    x2 = te.placeholder((1, 12, 128, 128), name="x")
    assert _count([x2, topi.nn.softmax(x2)]) == 9
    z = te.placeholder((128,), name="z")
    rz = te.reduce_axis((0, 128), name="r")
    assert _count([z, te.compute((), lambda: te.sum(z[rz], axis=rz), name="s")]) == 3
    assert _count(winograd_nhwc(1, 28, 128, 128)) == 3


def test_sketch_structure_cpu_matmul() -> None:
    sk = _policy(matmul(512, 512, 512)).generate_sketches()
    plain = [s for s in sk if len(s.stages) == 3]
    assert len(plain) == 1
    names = [it.name for it in plain[0].stages[2].iters]
    assert names == ["i.0", "j.0", "i.1", "j.1", "k.0", "i.2", "j.2", "k.1", "i.3", "j.3"]
    cached = [s for s in sk if len(s.stages) == 4]
    assert len(cached) == 2 and all(s.stages[2].op_name == "C.local" for s in cached)
    assert {s.attached_to(2)[1] for s in cached} == {1, 3}


def test_factorizations() -> None:
    f = factorizations(8, 2, 64)
    assert (1, 8) in f and (2, 4) in f and (8, 1) in f
    assert all(8 % (a * b) == 0 for a, b in f)
    assert all(x[-1] <= 2 for x in factorizations(16, 3, 2))


def _inputs(tensors: list, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
            for t in tensors]


def _check_states(tensors: list, states: list) -> None:
    from templtune.te.evaluate import evaluate

    dag = ComputeDAG(tensors)
    ins = _inputs(tensors)
    res = evaluate([tensors[-1]], {t: a for t, a in zip(tensors[:-1], ins[:-1])})
    ref = np.asarray(res[tensors[-1]] if isinstance(res, dict) else res[0])
    for s in states:
        sch, args = dag.apply_steps_from_state(s)
        mod = templtune.build(sch, args, target="llvm")
        arrs = [a.copy() for a in ins]
        mod(*arrs)
        np.testing.assert_allclose(arrs[-1], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
                                   err_msg=dag.print_python_code_from_state(s))


WORKLOADS = {
    "matmul_relu": lambda: matmul(32, 48, 64, relu=True),
    "matmul_small": lambda: matmul(4, 4, 128),
    "conv_bias_relu": lambda: conv_bias_relu(1, 8, 8, 4, 8, 3, 1, 1),
    "softmax": lambda: (lambda x: [x, topi.nn.softmax(x)])(te.placeholder((4, 64), name="x")),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_init_population_and_mutations_match_numpy(name: str) -> None:
    tensors = WORKLOADS[name]()
    pol = _policy(tensors, HardwareParams(2, 64, 64, 0, 0, 0, 0, 0), seed=3)
    pop = pol.sample_initial_population(6)
    assert len(pop) >= 3
    assert all(s.concrete for s in pop)
    rng = np.random.default_rng(5)
    mutated = []
    for s in pop:
        for f in (mutate_tile_size, mutate_auto_unroll, mutate_parallel,
                  mutate_compute_location):
            m = f(pol, s, rng)
            if m is not None and len(mutated) < 5:
                mutated.append(m)
    _check_states(tensors, pop[:4] + mutated)


def test_change_compute_location_moves_padding() -> None:
    tensors = conv_bias_relu(1, 8, 8, 4, 8, 3, 1, 1)
    pol = _policy(tensors, HardwareParams(2, 64, 64, 0, 0, 0, 0, 0), seed=0)
    pop = pol.sample_initial_population(12)
    moved = [s for s in pop if s.attached_to(1) is not None]  # pad_temp is stage 1
    assert moved
    rng = np.random.default_rng(0)
    muts = [m for m in (mutate_compute_location(pol, s, rng) for s in moved) if m is not None]
    assert muts and all(m.attached_to(1) is not None for m in muts)
    _check_states(tensors, moved[:2] + muts[:2])


def test_evolution_finds_good_state() -> None:
    from templtune.auto_scheduler.cost_model import CostModel

    class GoodModel(CostModel):
        """Score 1 for states whose k.1 tile is 2 (Ansor's evolution test)."""

        def update(self, inputs, results):
            pass

        def predict(self, task, states):
            out = []
            for s in states:
                it = {i.name: i.range for i in s.stages[2].iters}
                out.append(1.0 if it.get("k.1") == 2 else 0.0)
            return np.array(out)

    tensors = matmul(10, 10, 4)
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="llvm", hardware_params=HW4)
    pol = SketchPolicy(task, GoodModel(), params={"evolutionary_search_population": 64},
                       seed=1, verbose=0)
    pop = [s for s in pol.sample_initial_population(50)
           if len(s.stages) == 3 and {i.name: i.range for i in s.stages[2].iters}.get("k.1") != 2]
    assert pop
    best = pol.evolutionary_search(pop, 50)
    assert any({i.name: i.range for i in s.stages[2].iters}.get("k.1") == 2 for s in best)
