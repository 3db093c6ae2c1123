"""The command line as a user runs it (real subprocesses): ``--version``, ``python -m
templtune``, ``tune`` resume and ``--time-budget``, the progress bar on stderr, file modes from
the umask, the demo's log outside the checkout, ``--log`` in a missing folder, ``tune-network``
time budget, progress and ``--rpc-key``."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import templtune

ROOT = Path(templtune.__file__).resolve().parent.parent
SMALL_DENSE = ["--template", "dense", "--args", "8,16,8"]  # >= 10 configs on both ISAs
FAST = ["--number", "1", "--repeat", "1", "--n-parallel", "1"]


def templtune_cmd(*argv: str, cwd: Path | None = None, umask: int | None = None,
                  env: dict | None = None, timeout: float = 900
                  ) -> subprocess.CompletedProcess:
    """``python -m templtune ARGV`` on this checkout."""
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), full_env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "templtune", *argv], cwd=cwd or ROOT,
                          env=full_env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def _records(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


def test_version_and_python_dash_m():
    p = templtune_cmd("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"templtune {templtune.__version__}"
    p = templtune_cmd("templates")
    assert p.returncode == 0, p.stderr
    assert "conv2d_nchw" in p.stdout


def test_tune_resumes_from_its_log_and_no_resume_starts_over(tmp_path):
    log = tmp_path / "dense.log"
    argv = ["tune", *SMALL_DENSE, "--tuner", "random", "--log", str(log), *FAST,
            "--no-progress"]
    p = templtune_cmd(*argv, "--n-trial", "4")
    assert p.returncode == 0, p.stderr
    assert len(_records(log)) == 4
    p = templtune_cmd(*argv, "--n-trial", "4")  # the budget is already spent: nothing new
    assert p.returncode == 0, p.stderr
    assert "resuming from" in p.stderr
    assert len(_records(log)) == 4
    assert "trials:      0 (0 failed)" in p.stdout and "4 more resumed" in p.stdout
    assert "best config:" in p.stdout
    p = templtune_cmd(*argv, "--n-trial", "7")
    assert p.returncode == 0, p.stderr
    recs = _records(log)
    assert len(recs) == 7
    assert len({r["config"]["index"] for r in recs}) == 7  # nothing measured twice
    p = templtune_cmd(*argv, "--n-trial", "3", "--no-resume")
    assert p.returncode == 0, p.stderr
    assert "resuming" not in p.stderr and "trials:      3" in p.stdout
    assert len(_records(log)) == 10


def test_tune_time_budget_stops_early_and_bar_is_on_stderr(tmp_path):
    log = tmp_path / "conv.log"
    p = templtune_cmd("tune", "--template", "conv2d_nchw", "--args", "1,14,14,32,32,3,3,1,1",
                      "--tuner", "random", "--n-trial", "2000", "--time-budget", "8",
                      "--log", str(log), "--number", "1", "--repeat", "1")
    assert p.returncode == 0, p.stderr
    n = len(_records(log))
    assert 1 <= n < 2000
    wall = float(re.search(r"wall time ([\d.]+) s", p.stdout).group(1))
    assert wall < 8 + 120  # the running batch may finish after the budget; none starts after
    assert "trial" in p.stderr and "GFLOPS" in p.stderr  # the tqdm bar
    assert "Current/Best" not in p.stdout


def test_log_in_a_missing_folder_is_an_error(tmp_path):
    missing = tmp_path / "nonexistent_dir"
    p = templtune_cmd("tune", *SMALL_DENSE, "--n-trial", "1", "--log", str(missing / "x.log"),
                      "--no-progress")
    assert p.returncode == 1
    assert f"folder {missing} does not exist" in p.stderr
    assert "Traceback" not in p.stderr
    assert not missing.exists()


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664)])
def test_log_pick_and_split_follow_the_umask(tmp_path, umask, mode):
    log = tmp_path / "d.log"
    p = templtune_cmd("tune", *SMALL_DENSE, "--tuner", "random", "--n-trial", "3", "--log",
                      str(log), *FAST, "--no-progress", umask=umask)
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(log.stat().st_mode) == mode
    p = templtune_cmd("log", "pick", str(log), "-o", str(tmp_path / "best.log"), umask=umask)
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE((tmp_path / "best.log").stat().st_mode) == mode
    p = templtune_cmd("log", "split", str(log), "--out-dir", str(tmp_path / "parts"),
                      umask=umask)
    assert p.returncode == 0, p.stderr
    parts = list((tmp_path / "parts").iterdir())
    assert parts and all(stat.S_IMODE(x.stat().st_mode) == mode for x in parts)


def test_demo_writes_its_log_to_the_cache_folder_and_says_where(tmp_path):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    before = {p for p in ROOT.rglob("*.log")}
    p = templtune_cmd("demo", "--args", "1,6,6,16,8,3,3,1,1", "--tuner", "random",
                      "--n-trial", "2", "--number", "1", "--repeat", "1", "--rounds", "1",
                      "--no-progress", cwd=work, env={"XDG_CACHE_HOME": str(cache)})
    assert p.returncode == 0, p.stderr
    log = cache / "templtune" / "demo_conv2d_nchw.log"
    assert log.is_file() and len(_records(log)) == 2
    assert f"log: {log}" in p.stdout
    assert list(work.iterdir()) == []
    assert {p for p in ROOT.rglob("*.log")} == before


@pytest.mark.parametrize("method", ["auto_scheduler", "autotvm"])
def test_rpc_key_without_ray_says_how_to_install(tmp_path, method):
    fake = tmp_path / "hidden" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    p = templtune_cmd("tune-network", "resnet-18", "--image-shape", "3,32,32", "--method",
                      method, "--trials", "100", "--trials-per-task", "1", "--rpc-key", "cpu",
                      "--log", str(tmp_path / "x.log"), env={"PYTHONPATH": str(fake.parent)})
    assert p.returncode == 1
    assert "pip install 'templtune[distributed]'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_tune_network_time_budget_and_progress(tmp_path):
    log = tmp_path / "m.json"
    p = templtune_cmd("tune-network", "mobilenet", "--image-shape", "3,32,32", "--per-round",
                      "1", "--model", "random", "--trials", "100000", "--time-budget", "20",
                      "--log", str(log), "--timing-repeat", "1", "--timing-ms", "1")
    assert p.returncode == 0, p.stderr
    n = len(log.read_text().splitlines())
    done = int(re.search(r"tuned (\d+) trials", p.stdout).group(1))
    assert 0 < done == n < 100000
    assert "tune-network" in p.stderr and "est. latency" in p.stderr and "trial" in p.stderr
    table = json.loads(Path(f"{log}.tasks.json").read_text())["tasks"]
    assert table and all(r["weight"] >= 1 and r["flop"] > 0 for r in table)


@pytest.mark.slow
def test_tune_network_rpc_key_measures_through_ray(tmp_path):
    pytest.importorskip("ray")
    log = tmp_path / "r.log"
    p = templtune_cmd("tune-network", "resnet-18", "--image-shape", "3,32,32", "--method",
                      "autotvm", "--trials-per-task", "1", "--tuner", "random", "--rpc-key",
                      "templtune-cli-test", "--log", str(log), "--timing-repeat", "1",
                      "--timing-ms", "1", "--no-progress")
    assert p.returncode == 0, p.stderr
    # 12 extracted tasks and the 8 Winograd alternatives of the blocked 3x3 stride-1 convs
    assert p.stdout.count("GFLOPS after 1 trials") == 20
    recs = _records(log)
    assert len(recs) == 20 and sum(r["result"][1] == 0 for r in recs) >= 1


@pytest.mark.slow
def test_tune_network_auto_scheduler_rpc_key_measures_through_ray(tmp_path):
    pytest.importorskip("ray")
    log = tmp_path / "m.json"
    p = templtune_cmd("tune-network", "mobilenet", "--image-shape", "3,32,32", "--per-round",
                      "1", "--model", "random", "--trials", "30", "--rpc-key",
                      "templtune-cli-as-test", "--log", str(log), "--timing-repeat", "1",
                      "--timing-ms", "1", "--no-progress")
    assert p.returncode == 0, p.stderr
    recs = _records(log)
    assert len(recs) >= 22  # every task measured at least once
    ok = [r for r in recs if r["r"][1] == 0]
    assert len(ok) >= len(recs) // 2 and all(0 < r["r"][0][0] < 10 for r in ok)
    assert "check: the compiled network matches numpy" in p.stdout
