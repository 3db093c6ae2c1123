"""auto_scheduler on CUDA: sampled and picked states over the target's per-block limits are
dropped before measurement; the oracle is the CUDA backend's render (resource checks before
and after its passes)."""

from __future__ import annotations

import numpy as np
import pytest

from templtune import te, topi
from templtune.auto_scheduler import ComputeDAG, SearchTask, SketchPolicy
from templtune.auto_scheduler.measure import MeasureInput, MeasureResult
from templtune.codegen.cuda.build import CudaCodegen
from templtune.errors import InstantiationError
from templtune.lower.lower_api import lower


def _seed_conv() -> list:
    data = te.placeholder((1, 512, 7, 7), name="data")
    kernel = te.placeholder((512, 512, 3, 3), name="kernel")
    return [data, kernel, topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)]


def _matmul(n: int) -> list:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    r = te.reduce_axis((0, n), name="k")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")]


def _backend_rejects(policy: SketchPolicy, state) -> bool:
    """The oracle: whether the CUDA backend refuses to render ``state`` for the task's target
    (an ``INSTANTIATION_ERROR`` in a real build)."""
    sch, args = policy.dag.apply_steps_from_state(state, is_gpu=True)
    try:
        CudaCodegen().render(lower(sch, args, "default_function"), policy.task.target)
    except InstantiationError:
        return True
    return False


@pytest.mark.slow
def test_initial_population_of_the_seed_conv2d_fits_the_gpu():
    task = SearchTask(compute_dag=ComputeDAG(_seed_conv()), target="cuda")
    policy = SketchPolicy(task, seed=0, verbose=0)
    pop = policy.sample_initial_population(24)
    assert len(pop) == 24
    for state in pop:
        assert not _backend_rejects(policy, state)
    # this workload's random tiles do exceed the shared memory: the filter had work to do
    assert policy.gpu_limits.dropped > 0


class _RecordingMeasurer:
    """Stands in for the ProgramMeasurer: records what would be measured, costs at random."""

    def __init__(self) -> None:
        self.states: list = []
        self.rng = np.random.default_rng(0)

    def measure(self, task, policy, states):
        self.states.extend(states)
        inputs = [MeasureInput(task, s) for s in states]
        return inputs, [MeasureResult([float(self.rng.uniform(1e-4, 1e-3))], 0) for _ in states]


def test_picked_states_fit_a_small_gpu():
    target = "cuda -max_threads_per_block=64 -max_shared_memory_per_block=1024"
    task = SearchTask(compute_dag=ComputeDAG(_matmul(64)), target=target)
    policy = SketchPolicy(task, seed=1, verbose=0,
                          params={"evolutionary_search_population": 32,
                                  "sample_init_min_population": 16})
    measurer = _RecordingMeasurer()
    for _ in range(2):
        policy.continue_search_one_round(8, measurer)
    assert measurer.states
    for state in measurer.states:
        assert not _backend_rejects(policy, state)
    assert policy.gpu_limits.dropped > 0
