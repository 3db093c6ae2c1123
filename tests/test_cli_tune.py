"""``templtune tune|templates|space|best|demo`` end to end on small workloads, and their
one-line errors."""

from __future__ import annotations

import json

import pytest

from templtune.cli.main import main

SMALL_DENSE = "4,16,8"


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_templates_lists_every_template_with_arguments(capsys):
    rc, out, _ = run(capsys, "templates")
    assert rc == 0
    for name in ("conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "dense",
                 "conv2d_winograd"):
        assert name in out
    assert "args: M,N,K,[prepacked]" in out


def test_space_prints_the_knobs(capsys):
    rc, out, _ = run(capsys, "space", "--template", "conv2d_nchw", "--args",
                     "1,7,7,32,16,3,3,1,1")
    assert rc == 0
    for knob in ("tile_oc", "tile_oh", "tile_ow", "tile_ic", "unroll_kw"):
        assert knob in out
    assert "valid configs:" in out


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory):
    log = tmp_path_factory.mktemp("tune") / "sub" / "dense.log"
    log.parent.mkdir()  # --log names a file in an existing folder
    rc = main(["tune", "--template", "dense", "--args", SMALL_DENSE, "--tuner", "random",
               "--n-trial", "4", "--log", str(log), "--seed", "1", "--number", "1",
               "--repeat", "1", "--n-parallel", "1", "--no-progress"])
    assert rc == 0
    return log


def test_tune_writes_log_and_best_reads_it(tuned_log, capsys):
    rows = [json.loads(line) for line in tuned_log.read_text().splitlines() if line.strip()]
    assert len(rows) == 4
    assert rows[0]["input"][1] == "dense"
    rc, out, _ = run(capsys, "best", str(tuned_log))
    assert rc == 0
    assert "dense(4, 16, 8)" in out and "GFLOPS" in out and "1 workloads, 4 records" in out


def test_tune_summary(tmp_path, capsys):
    rc, out, _ = run(capsys, "tune", "--template", "dense", "--args", SMALL_DENSE,
                     "--tuner", "gridsearch", "--n-trial", "2", "--log", str(tmp_path / "g.log"),
                     "--number", "1", "--repeat", "1", "--n-parallel", "1", "--no-progress")
    assert rc == 0
    for key in ("best config:", "GFLOPS", "trials:      2", "wall time", "log:"):
        assert key in out


@pytest.mark.parametrize("argv,msg", [
    (["tune", "--template", "dense", "--args", "4,x,8"], "'x' is not an integer"),
    (["tune", "--template", "dense", "--args", "4,16"], "takes 3-4 arguments"),
    (["tune", "--template", "dense", "--args", ","], "comma-separated integers"),
    (["tune", "--template", "nope", "--args", "1"], "unknown template 'nope'"),
    (["space", "--template", "conv2d_winograd", "--args", "1,7,7,8,8,3,3,2,1"], "stride 1"),
    (["space", "--template", "dense", "--args", "0,4,4"], "M must be a positive"),
    (["space", "--template", "dense", "--args", "4,4,4", "--target", "nosuch"], "nosuch"),
    (["best", "/nonexistent/x.log"], "no such log file"),
    (["demo", "--args", "1,2,3"], "9 integers"),
])
def test_malformed_arguments_exit_nonzero_with_one_line(capsys, argv, msg):
    rc, out, err = run(capsys, *argv)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("templtune: error:")
    assert msg in lines[0]


@pytest.mark.parametrize("argv", [
    ["tune", "--template", "dense", "--args", "4,4,4", "--tuner", "magic"],
    ["tune", "--template", "dense", "--args", "4,4,4", "--n-trial", "0"],
    ["tune", "--args", "4,4,4"],
])
def test_usage_errors_exit_2(capsys, argv):
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert "error" in err


def test_best_with_only_failed_records(tmp_path, tuned_log, capsys):
    rows = [json.loads(line) for line in tuned_log.read_text().splitlines() if line.strip()]
    bad = tmp_path / "bad.log"
    for r in rows:
        r["result"][1] = 4  # RUNTIME_DEVICE-style failure
    bad.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rc, _, err = run(capsys, "best", str(bad))
    assert rc == 1 and "no successful record" in err


def test_demo_small_workload_end_to_end(tmp_path, capsys):
    log = tmp_path / "logs" / "demo.log"
    log.parent.mkdir()
    rc, out, err = run(capsys, "demo", "--args", "1,6,6,16,8,3,3,1,1", "--tuner", "random",
                       "--n-trial", "2", "--log", str(log), "--number", "1", "--repeat", "1",
                       "--rounds", "1", "--no-progress")
    assert rc == 0, err
    assert log.is_file()
    assert "matches numpy" in out
    assert "numpy:" in out and "ratio:" in out
