"""``templtune tune-network``: extract, (tune,) compile, check against numpy, time."""

from __future__ import annotations

import re

import pytest

from templtune.cli.main import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_compile_and_time_without_tuning(capsys, tmp_path):
    rc, out, _ = run(capsys, "tune-network", "resnet-18", "--image-shape", "3,32,32",
                     "--log", str(tmp_path / "none.json"), "--timing-repeat", "1",
                     "--timing-ms", "1")
    assert rc == 0, out
    assert "resnet-18: 19 tasks" in out
    assert "fused_nn_conv2d_nn_bias_add_add_nn_relu" in out
    assert "compiled 24 groups (" in out and "from tuning records)" in out
    assert "check: the compiled network matches numpy" in out
    assert "Mean inference time (std dev):" in out


@pytest.mark.parametrize("argv, msg", [
    (("alexnet",), "unknown network 'alexnet'"),
    (("resnet-18", "--image-shape", "32,32"), "--image-shape takes C,H,W"),
    (("resnet-18", "--image-shape", "3,32,32", "--trials", "5"), "below the number of tasks"),
])
def test_bad_arguments_give_one_clear_line(capsys, argv, msg):
    rc, _, err = run(capsys, "tune-network", *argv)
    assert rc != 0
    assert msg in err


@pytest.mark.slow
def test_tune_a_small_network_then_resume(capsys, tmp_path):
    log = str(tmp_path / "m.json")
    argv = ("tune-network", "mobilenet", "--image-shape", "3,32,32", "--per-round", "1",
            "--model", "random", "--log", log, "--timing-repeat", "1", "--timing-ms", "1")
    rc, out, _ = run(capsys, *argv, "--trials", "30")
    assert rc == 0, out
    n_tasks = int(out.split(": ", 1)[1].split(" tasks")[0])
    with open(log) as f:
        n_records = sum(1 for _ in f)
    assert n_records >= n_tasks
    assert "from tuning records)" in out and "(0 from tuning records)" not in out
    assert "check: the compiled network matches numpy" in out


def test_autotvm_method_builds_with_templates(capsys, tmp_path):
    rc, out, _ = run(capsys, "tune-network", "resnet-18", "--image-shape", "3,32,32",
                     "--method", "autotvm", "--log", str(tmp_path / "none.log"),
                     "--timing-repeat", "1", "--timing-ms", "1")
    assert rc == 0, out
    # 12 extracted (TVM's one per anchor) and 8 Winograd alternatives of the blocked 3x3
    # stride-1 convolutions (m 2 and 4 at each of the 4 stages)
    assert "resnet-18: 20 AutoTVM tasks" in out and "dense(1, 1000, 512" in out
    assert out.count("conv2d_NCHWc_winograd(1, ") == 8
    assert "check: the compiled network matches numpy" in out


@pytest.mark.slow
def test_autotvm_method_tunes_every_task(capsys, tmp_path):
    log = tmp_path / "t.log"
    rc, out, _ = run(capsys, "tune-network", "resnet-18", "--image-shape", "3,32,32",
                     "--method", "autotvm", "--trials-per-task", "2", "--tuner", "random",
                     "--log", str(log), "--timing-repeat", "1", "--timing-ms", "1")
    assert rc == 0, out
    assert out.count("GFLOPS after 2 trials") == 20
    # opt_level 3 (the tasks are conv2d_NCHWc): a layout transform where two layers' tuned
    # blockings differ (which config wins each task varies with the timings)
    m = re.search(r"compiled (\d+) groups \(21 from tuning records\)", out)
    assert m and int(m.group(1)) >= 24, out
    assert len(log.read_text().splitlines()) == 40
    # each task's configs measured again; the build takes those records
    best = tmp_path / "t.best.log"
    assert 20 <= len(best.read_text().splitlines()) <= 40
    assert f"building with the records of {best}" in out


def test_tuning_measures_the_packaged_record_first(tmp_path):
    from templtune import autotvm
    from templtune.autotvm import env
    from templtune.autotvm.record import load_from_file
    from templtune.autotvm.strategy import load_templates
    from templtune.cli.tune_cmd import tune_task
    from templtune.cli.tune_network_cmd import packaged_configs

    load_templates()
    task = autotvm.task.create("dense", (1, 1000, 512), "llvm")
    seeds = packaged_configs(task)
    if not seeds:
        pytest.skip("no packaged record of resnet-18's dense for this host's ISA family")
    with env.scope(use_reference_logs=False):
        assert packaged_configs(task) == []
    log = tmp_path / "t.log"
    tune_task(task, tuner="random", n_trial=3, log=log, progress=False, initial_configs=seeds,
              number=1, repeat=1)
    indices = [inp.config.index for inp, _ in load_from_file(str(log))]
    assert indices[0] == seeds[0].index and len(set(indices)) == 3
