"""Item 16 of issue 16: bad parameters raise ``ValueError`` naming the parameter, up front."""

from __future__ import annotations

import pytest

from templtune import auto_scheduler
from templtune.autotvm.callback import log_to_file
from templtune.autotvm.measure import LocalBuilder, LocalRunner, RPCRunner, measure_option
from templtune.autotvm.task.task import create
from templtune.autotvm.tuner import GridSearchTuner, RandomTuner
from templtune.measure.fake import FakeBuilder, FakeRunner

BAD_CONSTRUCTORS = [
    (LocalBuilder, {"n_parallel": -1}, "n_parallel"),
    (LocalBuilder, {"n_parallel": 2.5}, "n_parallel"),
    (LocalBuilder, {"timeout": 0}, "timeout"),
    (LocalBuilder, {"timeout": float("nan")}, "timeout"),
    (LocalRunner, {"number": 0}, "number"),
    (LocalRunner, {"number": 1.5}, "number"),
    (LocalRunner, {"repeat": 0}, "repeat"),
    (LocalRunner, {"min_repeat_ms": -1}, "min_repeat_ms"),
    (LocalRunner, {"timeout": -5}, "timeout"),
    (LocalRunner, {"cooldown_interval": -0.1}, "cooldown_interval"),
    (LocalRunner, {"atol": -1e-3}, "atol"),
    (auto_scheduler.LocalBuilder, {"n_parallel": -1}, "n_parallel"),
    (auto_scheduler.LocalRunner, {"number": 0}, "number"),
    (auto_scheduler.LocalRunner, {"min_repeat_ms": -1}, "min_repeat_ms"),
    # checked before Ray is imported or contacted
    (RPCRunner, {"key": "dev", "number": 0}, "number"),
    (RPCRunner, {"key": "dev", "timeout": 0}, "timeout"),
]


@pytest.mark.parametrize(("cls", "kwargs", "name"), BAD_CONSTRUCTORS,
                         ids=[f"{c.__module__.split('.')[1]}.{c.__name__}-{n}={list(k.values())[-1]}"
                              for c, k, n in BAD_CONSTRUCTORS])
def test_bad_constructor_parameter_raises_value_error(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


def _task():
    import test_faults_procs  # noqa: F401 - registers the templates

    return create("faults_procs/spawner", ("/nonexistent", -1), "llvm")


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"n_trial": -3}, "n_trial"),
    ({"n_trial": 2.5}, "n_trial"),
    ({"n_trial": "10"}, "n_trial"),
    ({"n_trial": True}, "n_trial"),
    ({"n_trial": 4, "early_stopping": -1}, "early_stopping"),
])
def test_bad_tune_parameter_raises_before_measuring(kwargs, name):
    opt = measure_option(FakeBuilder(n_parallel=2), FakeRunner())
    with pytest.raises(ValueError, match=name):
        RandomTuner(_task(), seed=0).tune(measure_option=opt, **kwargs)
    assert opt["runner"].measured == []


def test_log_into_a_missing_directory_fails_before_measuring(tmp_path):
    opt = measure_option(FakeBuilder(n_parallel=2), FakeRunner())
    missing = tmp_path / "no_such_dir" / "t.log"
    with pytest.raises(ValueError, match="no_such_dir"):
        GridSearchTuner(_task()).tune(n_trial=3, measure_option=opt,
                                      callbacks=[log_to_file(str(missing))])
    assert opt["runner"].measured == []
    # a writable path is accepted and receives every record
    ok = tmp_path / "t.log"
    GridSearchTuner(_task()).tune(n_trial=3, measure_option=opt, callbacks=[log_to_file(str(ok))])
    assert len(ok.read_text().splitlines()) == 3
