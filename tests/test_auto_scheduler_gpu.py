"""auto_scheduler on CUDA: sketches, thread binding, emulated results vs numpy, nvcc compile."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy


def matmul(n: int, m: int, k: int, relu: bool = False) -> list:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    if relu:
        return [a, b, te.compute((n, m), lambda i, j: te.max(c[i, j], 0.0), name="D")]
    return [a, b, c]


def conv_bias_relu() -> list:
    data = te.placeholder((1, 4, 6, 6), name="data")
    kernel = te.placeholder((8, 4, 3, 3), name="kernel")
    bias = te.placeholder((1, 8, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)
    return [data, kernel, bias, topi.nn.relu(conv + bias)]


def _small_unroll(dag: ComputeDAG, state):
    """The state with its auto-unroll pragmas set to 16 (large unrolled GPU bodies make the
    CUDA renderer slow; the unroll values are not under test here)."""
    from templtune.auto_scheduler.transform_step import PragmaStep

    steps = [PragmaStep(x.stage_id, x.iter_id, "auto_unroll_max_step$16")
             if isinstance(x, PragmaStep) else x for x in state.transform_steps]
    return dag.replay(steps)


def _policy(tensors: list, seed: int = 0) -> SketchPolicy:
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="cuda")
    return SketchPolicy(task, seed=seed, verbose=0)


def test_gpu_sketch_matmul() -> None:
    sk = _policy(matmul(512, 512, 512)).generate_sketches()
    assert len(sk) == 1
    names = [st.op_name for st in sk[0].stages]
    assert names == ["A", "A.shared", "B", "B.shared", "C.local", "C"]
    local = [it.name for it in sk[0].stages[4].iters]
    assert local[:6] == ["i.c.0", "j.c.0", "i.c.1", "j.c.1", "i.c.2", "j.c.2"]
    assert local[6:8] == ["k.0", "k.1"]


@pytest.mark.parametrize("make", [lambda: matmul(16, 16, 16, relu=True),
                                  lambda: matmul(16, 16, 32),
                                  pytest.param(conv_bias_relu, marks=pytest.mark.slow)])
def test_gpu_states_emulate_correctly(make) -> None:
    from templtune.runtime.cuda.emulate import run_module
    from templtune.te.evaluate import evaluate

    tensors = make()
    pol = _policy(tensors, seed=4)
    pop = pol.sample_initial_population(3)
    assert pop
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
           for t in tensors]
    res = evaluate([tensors[-1]], {t: a for t, a in zip(tensors[:-1], ins[:-1])})
    ref = np.asarray(res[tensors[-1]] if isinstance(res, dict) else res[0])
    dag = pol.dag
    for s in pop[:2]:
        s = _small_unroll(dag, s)
        sch, args = dag.apply_steps_from_state(s, is_gpu=True)
        mod = templtune.build(sch, args, target="cuda")
        arrs = [a.copy() for a in ins]
        run_module(mod, arrs)
        np.testing.assert_allclose(arrs[-1], ref, rtol=1e-4, atol=1e-4,
                                   err_msg=dag.print_python_code_from_state(s))


def test_gpu_source_compiles_with_nvcc() -> None:
    from templtune.codegen.cuda.compile import compile_cuda, find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    pol = _policy(matmul(32, 32, 32), seed=1)
    s = _small_unroll(pol.dag, pol.sample_initial_population(1)[0])
    sch, args = pol.dag.apply_steps_from_state(s, is_gpu=True)
    src = templtune.build(sch, args, target="cuda").get_source()
    assert "__global__" in src and "__shared__" in src
    assert compile_cuda(src)
