"""RPCRunner on a local Ray instance advertising the device key: real builds, real timings,
and the failure modes (wrong answer, crash, overrun) isolated as with LocalRunner."""

from __future__ import annotations

import pytest

from templtune.autotvm.measure import LocalBuilder, MeasureErrorNo, RPCRunner, measure_option

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

KEY = "templtune-test-cpu"


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, resources={KEY: 2}, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_times_real_candidates_in_parallel(cluster):
    from test_measure_local import measure_first_configs

    runner = RPCRunner(KEY, n_parallel=2, number=2, repeat=3, cooldown_interval=0)
    results = measure_first_configs(measure_option(LocalBuilder(n_parallel=2), runner))
    for res in results:
        assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_detail
        assert len(res.costs) == 1 and 0 < res.costs[0] < 1


def test_failures_are_isolated_and_the_actor_is_replaced(cluster):
    from test_measure_local import EXPECTED, MODES, tune_every_failure_mode

    opt = measure_option(LocalBuilder(timeout=3, n_parallel=2),
                         RPCRunner(KEY, n_parallel=2, timeout=3, cooldown_interval=0))
    tuner, seen = tune_every_failure_mode(opt)
    assert len(seen) == len(MODES) + 1
    for mode, res in seen.values():
        assert res.error_no == EXPECTED[mode], (mode, res.error_no, res.error_detail[:500])
    assert tuner.best_config is not None and tuner.best_config["mode"].val == "ok"


def test_unknown_key_names_the_fix(cluster):
    with pytest.raises(RuntimeError, match="no Ray node advertises the device key 'h200'"):
        RPCRunner("h200")
