"""auto_scheduler CPU initial population: fused vectorization of tiled stages, register-sized
innermost tiles; every sampled and mutated state still matches numpy."""

from __future__ import annotations

import numpy as np

import templtune
from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy
from templtune.auto_scheduler.mutation import mutate_tile_size
from templtune.auto_scheduler.search_policy import CPU_PARAMS, DEFAULT_PARAMS
from templtune.auto_scheduler.search_task import HardwareParams
from templtune.auto_scheduler.sketch import is_tiled
from templtune.auto_scheduler.transform_step import AnnotationStep, FuseStep, SplitStep

HW = HardwareParams(2, 64, 64, 0, 0, 0, 0, 0)


def conv_relu() -> list:
    data = te.placeholder((1, 4, 6, 6), name="data")
    kernel = te.placeholder((16, 4, 3, 3), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)
    return [data, kernel, topi.nn.relu(conv)]


def _policy(tensors: list, target: str = "llvm", seed: int = 0) -> SketchPolicy:
    task = SearchTask(compute_dag=ComputeDAG(tensors), target=target, hardware_params=HW)
    return SketchPolicy(task, seed=seed, verbose=0)


def _vectorized_fused_tiled(state) -> bool:
    """True when a tiled stage vectorizes an iterator made by fusing its innermost ones."""
    steps = state.transform_steps
    for n, s in enumerate(steps):
        if isinstance(s, AnnotationStep) and s.annotation == 2 and n and \
                isinstance(steps[n - 1], FuseStep) and steps[n - 1].stage_id == s.stage_id:
            pre = state.stages[s.stage_id]
            if is_tiled(state, s.stage_id) and pre.iters[s.iter_id].annotation == 2:
                return True
    return False


def _check(tensors: list, states: list) -> None:
    from templtune.te.evaluate import evaluate

    dag = ComputeDAG(tensors)
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, [int(x.value) for x in t.shape]).astype("float32")
           for t in tensors[:-1]]
    res = evaluate([tensors[-1]], dict(zip(tensors[:-1], ins)))
    ref = np.asarray(res[tensors[-1]] if isinstance(res, dict) else res[0])
    for s in states:
        sch, args = dag.apply_steps_from_state(s)
        mod = templtune.build(sch, args, target="llvm")
        out = np.zeros(ref.shape, "float32")
        mod(*[a.copy() for a in ins], out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
                                   err_msg=dag.print_python_code_from_state(s))


def test_cpu_innermost_tiles_register_sized_gpu_keeps_tvm_default() -> None:
    a = te.placeholder((64, 64), name="a")
    b = te.placeholder((64, 64), name="b")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    cpu = _policy([a, b, c])
    assert cpu.params["max_innermost_split_factor"] == CPU_PARAMS[
        "max_innermost_split_factor"] == 16
    pop = cpu.sample_initial_population(20)
    lens = [s.lengths[-1] for p in pop for s in p.transform_steps if isinstance(s, SplitStep)]
    assert lens and max(lens) <= 16
    rng = np.random.default_rng(0)
    for p in pop:
        m = mutate_tile_size(cpu, p, rng)
        if m is not None:
            assert all(s.lengths[-1] <= 16 for s in m.transform_steps
                       if isinstance(s, SplitStep))
    gpu = SketchPolicy(SearchTask(compute_dag=ComputeDAG([a, b, c]), target="cuda"), seed=0,
                       verbose=0)
    assert gpu.params["max_innermost_split_factor"] == DEFAULT_PARAMS[
        "max_innermost_split_factor"] == 64
    user = SketchPolicy(cpu.task, seed=0, verbose=0,
                        params={"max_innermost_split_factor": 64})
    assert user.params["max_innermost_split_factor"] == 64


def test_tiled_stage_fuses_innermost_before_vectorizing_and_matches_numpy() -> None:
    tensors = conv_relu()
    pol = _policy(tensors, seed=1)
    pop = pol.sample_initial_population(40)
    fused = [s for s in pop if _vectorized_fused_tiled(s)]
    assert fused, "no tiled stage vectorized a fused iterator in 40 samples"
    rng = np.random.default_rng(3)
    muts = [m for m in (mutate_tile_size(pol, s, rng) for s in fused) if m is not None]
    _check(tensors, fused[:4] + muts[:3])
