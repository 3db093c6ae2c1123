"""The tuner registry: a tuner added as one file in templtune/autotvm/tuner/ is picked up by the
CLI (``--tuner`` choices, ``make_tuner``) and by the parametrized fake-space tests."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

import templtune.autotvm.tuner as tuner_pkg
from templtune.autotvm.tuner import registry
from templtune.cli.main import build_parser, main
from templtune.cli.tune_cmd import make_tuner, tuner_names

NAME = "reverse_grid_throwaway"
MODULE = "reverse_grid_throwaway_tuner"

# The whole file a tuner author writes: nothing else is edited.
TUNER_FILE = f'''
from templtune.autotvm.tuner.index_based import IndexBaseTuner, space_is_valid
from templtune.autotvm.tuner.registry import register_tuner


@register_tuner("{NAME}", "valid configs in descending index order")
class ReverseGridTuner(IndexBaseTuner):
    def __init__(self, task, range_idx=None, **kwargs):
        super().__init__(task, range_idx=range_idx, **kwargs)
        self.index = self.end_idx - 1

    def _next_index(self):
        while self.index >= self.begin_idx:
            i = self.index
            self.index -= 1
            if i not in self.visited and space_is_valid(self.space, i):
                return i
        return None
'''


@pytest.fixture
def throwaway_tuner(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):
    """Drop the file into (a folder on the path of) the tuner package."""
    (tmp_path / f"{MODULE}.py").write_text(TUNER_FILE)
    monkeypatch.setattr(tuner_pkg, "__path__", [*tuner_pkg.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "TUNERS", dict(registry.TUNERS))
    yield
    sys.modules.pop(f"templtune.autotvm.tuner.{MODULE}", None)


def test_builtin_tuners_are_registered() -> None:
    tuners = registry.load_tuners()
    assert {"xgb", "ga", "random", "gridsearch"} <= set(tuners)
    assert tuners["xgb"].needs_features and not tuners["random"].needs_features
    assert tuners["ga"].cls is tuner_pkg.GATuner


def test_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="taken"):
        registry.register_tuner("random", "clash")(type("Other", (), {}))


def test_one_file_tuner_reaches_the_cli(throwaway_tuner: None) -> None:
    assert NAME not in registry.TUNERS
    assert NAME in tuner_names()
    args = build_parser().parse_args(["tune", "--template", "dense", "--args", "4,16,8",
                                      "--tuner", NAME])
    assert args.tuner == NAME
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tune", "--template", "dense", "--args", "4,16,8",
                                   "--tuner", "no_such_tuner"])


def test_one_file_tuner_reaches_the_fake_space_tests(throwaway_tuner: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a fresh import of the test module: its parametrization is read from the registry
    path = pathlib.Path(__file__).with_name("test_tuner_fake.py")
    spec = importlib.util.spec_from_file_location("_tuner_fake_again", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    spec.loader.exec_module(mod)
    assert NAME in mod.TUNERS
    # the parametrized checks run on it as on the built-in tuners
    mod.test_budget_and_determinism(NAME)
    mod.test_full_loop_no_repeats_and_valid(NAME, mod.multi_filter)
    tuner = mod.TUNERS[NAME](mod.make_task(), seed=0)
    assert type(tuner).__name__ == "ReverseGridTuner"
    assert tuner.next_batch(1)[0].index == len(mod.make_task().config_space) - 1


@pytest.mark.slow
def test_one_file_tuner_tunes_from_the_shell(throwaway_tuner: None, tmp_path: pathlib.Path
                                             ) -> None:
    log = tmp_path / "dense.log"
    rc = main(["tune", "--template", "dense", "--args", "4,16,8", "--tuner", NAME,
               "--n-trial", "2", "--log", str(log), "--number", "1", "--repeat", "1",
               "--n-parallel", "1", "--no-progress"])
    assert rc == 0
    assert len(log.read_text().splitlines()) == 2


def test_make_tuner_names_the_registered_ones() -> None:
    from templtune.cli.main import CliError

    with pytest.raises(CliError, match="registered: .*random"):
        make_tuner("magic", object(), 0)
