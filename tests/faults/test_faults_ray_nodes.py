"""Item 18 of issue 16: when a device node of the Ray cluster dies, tuning goes on on the
devices that are left, without a 300 s stall per batch. Two real Ray nodes on this machine; the
second one's processes are killed (``Cluster.remove_node``)."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from templtune.autotvm.measure import (  # noqa: E402
    LocalBuilder,
    MeasureErrorNo,
    MeasureInput,
    RPCRunner,
    create_measure_batch,
    measure_option,
)
from templtune.autotvm.task.task import create  # noqa: E402

pytestmark = pytest.mark.slow

KEY = "templtune-faults-node"


def test_measuring_continues_after_a_device_node_dies():
    import test_faults_ray  # noqa: F401 - registers the template

    if ray.is_initialized():
        ray.shutdown()
    cluster = cluster_utils.Cluster(initialize_head=True, connect=True, head_node_args={
        "num_cpus": 1, "resources": {KEY: 1}, "include_dashboard": False})
    try:
        doomed = cluster.add_node(num_cpus=1, resources={KEY: 1})
        cluster.wait_for_nodes()
        task = create("faults_ray/vadd", (64,), "llvm")
        runner = RPCRunner(KEY, n_parallel=2, number=1, repeat=1, cooldown_interval=0,
                           timeout=20, placement_timeout=10)
        batch = create_measure_batch(task, measure_option(LocalBuilder(n_parallel=2), runner))
        inputs = [MeasureInput(task.target, task, task.config_space.get(i)) for i in range(4)]
        try:
            before = batch(inputs)
            assert all(r.error_no == MeasureErrorNo.NO_ERROR for r in before), before
            cluster.remove_node(doomed)
            times, after = [], []
            for _ in range(2):
                t0 = time.monotonic()
                after.append(batch(inputs))
                times.append(time.monotonic() - t0)
        finally:
            batch.close()
        # the batch right after the death may lose the candidates that were on the dead node;
        # the next one runs everything on the remaining device
        assert sum(r.error_no == MeasureErrorNo.NO_ERROR for r in after[0]) >= 2, after[0]
        assert all(r.error_no == MeasureErrorNo.NO_ERROR for r in after[1]), after[1]
        assert max(times) < 120, times  # the old runner blocked 300 s in every batch
    finally:
        ray.shutdown()
        cluster.shutdown()
