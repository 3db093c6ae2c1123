"""CUDA without a GPU: the emulator is picked automatically (one warning, LLVM mode), a real
runtime asked for by name is an error naming the emulator, emulated timings are marked in the
records and a real GPU's ``apply_history_best`` ignores them.

Environment-dependent behaviour runs in real child processes with a cleaned environment."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from templtune import autotvm, te
from templtune.runtime.cuda.backend import device_exists

ROOT = pathlib.Path(__file__).resolve().parents[1]
_KNOBS = ("TEMPLTUNE_CUDA_BACKEND", "TEMPLTUNE_CUDA_EMULATOR", "TEMPLTUNE_TEST_REAL_GPU")

pytestmark = pytest.mark.skipif(device_exists(), reason="checks the machine without a GPU")

_RUN_TWICE = """
import logging, sys
import numpy as np
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from templtune.codegen.cuda import examples as ex
from templtune.runtime.cuda.backend import get_backend
from templtune.runtime.cuda.module import build_cuda
func, make, ref = ex.tiled_matmul(vt=2)
m = build_cuda(func, compile=False)
for seed in (0, 1):
    args = make(np.random.default_rng(seed))
    m(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=1e-5)
m.time_evaluator(m.entry_name, None, number=1, repeat=2)(*args)
be = get_backend()
print("BACKEND", be.name, be.mode)
"""


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    clean.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, text=True,
                          capture_output=True, timeout=600)


def test_no_settings_runs_on_the_llvm_emulator_with_one_warning():
    out = _child(_RUN_TWICE)
    assert out.returncode == 0, out.stderr
    assert "BACKEND emulator llvm" in out.stdout
    warnings = [ln for ln in out.stderr.splitlines() if "CPU emulator" in ln]
    assert len(warnings) == 1, out.stderr
    assert "CPU timings" in warnings[0] and warnings[0].startswith("WARNING")


def test_explicit_emulator_does_not_warn_and_lockstep_stays_selectable():
    out = _child(_RUN_TWICE, TEMPLTUNE_CUDA_BACKEND="emulator",
                 TEMPLTUNE_CUDA_EMULATOR="lockstep")
    assert out.returncode == 0, out.stderr
    assert "BACKEND emulator lockstep" in out.stdout
    assert "CPU emulator" not in out.stderr


@pytest.mark.parametrize("name", ["pycuda", "cuda-python"])
def test_asking_for_a_missing_gpu_names_the_emulator_setting(name):
    out = _child(_RUN_TWICE, TEMPLTUNE_CUDA_BACKEND=name)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("templtune.runtime.cuda.backend.CudaUnavailableError")
    assert f"{name!r}" in last and "TEMPLTUNE_CUDA_BACKEND" in last and "emulator" in last


@autotvm.template("test_cuda_no_gpu/scale")
def scale(n):
    cfg = autotvm.get_config()
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    cfg.define_split("tx", B.op.axis[0], num_outputs=2)
    bx, tx = cfg["tx"].apply(s, B, B.op.axis[0])
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def _tune_log(tmp_path, monkeypatch) -> pathlib.Path:
    """Measure two configs with no CUDA setting: builder and runner are real processes."""
    for k in _KNOBS:
        monkeypatch.delenv(k, raising=False)
    task = autotvm.task.create("test_cuda_no_gpu/scale", (64,), "cuda")
    opt = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1, timeout=120),
                                 autotvm.LocalRunner(number=1, repeat=1, timeout=120))
    batch = autotvm.measure.create_measure_batch(task, opt)
    try:
        inputs = [autotvm.measure.MeasureInput(task.target, task, task.config_space.get(i))
                  for i in (1, 2)]
        results = batch(inputs)
    finally:
        batch.close()
    assert all(r.ok for r in results), [r.error_detail for r in results]
    assert {r.device for r in results} == {"emulator"}
    log = tmp_path / "scale.log"
    autotvm.callback.log_to_file(str(log))(None, inputs, results)
    return log


@pytest.mark.cuda
def test_emulated_records_are_marked_and_ignored_for_a_real_gpu(tmp_path, monkeypatch, caplog):
    from templtune.autotvm.record import load_from_file
    from templtune.target import Target

    log = _tune_log(tmp_path, monkeypatch)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["device"] for r in rows] == ["emulator", "emulator"]
    assert all(res.device == "emulator" for _, res in load_from_file(str(log)))

    def best(**kw):
        with autotvm.apply_history_best(str(log), **kw) as ctx, Target("cuda"):
            return ctx.query(Target("cuda"), ("test_cuda_no_gpu/scale", 64))

    # on the emulator (this machine, nothing set) the records are used ...
    assert best().index in (1, 2)
    assert best(include_emulated=False).is_fallback
    # ... a real GPU runtime asked for ignores them unless asked to use them
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "pycuda")
    with caplog.at_level("WARNING", logger="autotvm"):
        assert best().is_fallback
    assert "ignored 2 records timed on the CPU CUDA emulator" in caplog.text
    assert best(include_emulated=True).index in (1, 2)


def test_old_records_without_a_device_stay_readable_and_trusted(monkeypatch):
    from templtune.autotvm.record import decode, encode

    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "pycuda")
    task = autotvm.task.create("test_cuda_no_gpu/scale", (64,), "cuda")
    inp = autotvm.measure.MeasureInput(task.target, task, task.config_space.get(3))
    res = autotvm.measure.MeasureResult((1e-5,), 0, 0.1, 1.0)
    line = encode(inp, res)
    assert "device" not in json.loads(line)
    _, back = decode(line)
    assert back.device == ""
    ctx = autotvm.apply_history_best([(inp, back)])
    assert ctx.query(task.target, task.workload).index == 3
    row = json.loads(line)
    row["device"] = 3
    with pytest.raises(TypeError, match="device"):
        decode(json.dumps(row))


def test_auto_scheduler_records_carry_the_device(tmp_path, monkeypatch):
    from templtune import auto_scheduler as auto
    from templtune.auto_scheduler.measure_record import (
        dump_record_to_string,
        load_record_from_string,
    )

    @auto.register_workload("test_cuda_no_gpu/as_scale")
    def as_scale(n):
        A = te.placeholder((n,), name="A")
        return [A, te.compute((n,), lambda i: A[i] * 2.0, name="B")]

    task = auto.SearchTask(func=as_scale, args=(64,), target="cuda")
    inp = auto.MeasureInput(task, task.compute_dag.init_state)
    emulated = auto.MeasureResult([1e-5], 0, "", 0.1, 1.0, device="emulator")
    line = dump_record_to_string(inp, emulated)
    assert json.loads(line)["device"] == "emulator"
    back_inp, back = load_record_from_string(line)
    assert back.device == "emulator"
    plain = load_record_from_string(dump_record_to_string(inp, auto.MeasureResult([1e-5], 0)))[1]
    assert plain.device == "" and "device" not in dump_record_to_string(inp, plain)
    with pytest.raises(ValueError, match="unknown keys"):
        load_record_from_string(line.replace('"device"', '"devic"'))

    key, target = task.workload_key, "cuda"
    monkeypatch.delenv("TEMPLTUNE_CUDA_BACKEND", raising=False)
    assert auto.ApplyHistoryBest([(back_inp, back)]).query(target, key) is not None
    monkeypatch.setenv("TEMPLTUNE_CUDA_BACKEND", "cuda-python")
    assert auto.ApplyHistoryBest([(back_inp, back)]).query(target, key) is None
    assert auto.ApplyHistoryBest([(back_inp, back)], include_emulated=True).query(
        target, key) is not None


def _cli(capsys, *argv):
    from templtune.cli.main import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_templates_by_target(capsys):
    rc, out, _ = _cli(capsys, "templates", "--target", "cuda")
    assert rc == 0
    names = {ln.split()[0] for ln in out.splitlines() if ln and not ln.startswith(" ")}
    assert {"conv2d_nchw.cuda", "dense.cuda", "conv2d_nchw_winograd.cuda"} <= names
    assert "dense" not in names and "conv2d_nhwc" not in names
    rc, out, _ = _cli(capsys, "templates", "--target", "llvm")
    assert rc == 0 and "dense.cuda" not in out and "conv2d_nhwc" in out
    rc, _, err = _cli(capsys, "templates", "--target", "nosuch")
    assert rc == 1 and "nosuch" in err


@pytest.mark.parametrize("template,args,target,want", [
    ("dense", "4,16,8", "cuda", "'dense' is for llvm targets"),
    ("dense.cuda", "1,32,16", "llvm", "'dense.cuda' is for cuda targets"),
])
def test_cli_tune_refuses_a_template_of_another_target(capsys, tmp_path, template, args,
                                                       target, want):
    log = tmp_path / "x.log"
    rc, _, err = _cli(capsys, "tune", "--template", template, "--args", args, "--target", target,
                      "--n-trial", "1", "--log", str(log))
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and want in lines[0], err
    assert f"templates --target {target}" in lines[0]
    assert not log.exists()  # refused before any trial


@pytest.mark.cuda
def test_cli_tunes_a_cuda_template_on_the_emulator(tmp_path, monkeypatch):
    log = tmp_path / "dense.log"
    code = ("import sys; from templtune.cli.main import main; sys.exit(main(sys.argv[1:]))")
    clean = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    out = subprocess.run([sys.executable, "-c", code, "tune", "--template", "dense.cuda",
                          "--args", "1,32,16", "--target", "cuda", "--tuner", "random",
                          "--n-trial", "2", "--log", str(log)], cwd=ROOT, env=clean, text=True,
                         capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "CPU timings" in out.stderr
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 2 and all(r["result"][1] == 0 and r["device"] == "emulator"
                                  for r in rows)


@autotvm.template("test_no_gpu/vadd_salted")
def _vadd_salted(n, salt):
    cfg = autotvm.get_config()
    cfg.define_knob("tx", [32])
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + float(salt), name="B")  # salt: no nvcc cache hit
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=cfg["tx"].val)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_emulated_cuda_candidates_get_stretched_timeouts():
    """A timeout is a GPU budget: on the emulator a CUDA candidate gets ``timeout x scale``
    (nvcc plus the emulator's host compile, then emulated runs), a CPU candidate gets ``timeout``."""
    import random
    import shutil

    from templtune import config
    from templtune.autotvm.measure import (
        LocalBuilder,
        LocalRunner,
        MeasureErrorNo,
        MeasureInput,
        create_measure_batch,
        measure_option,
    )

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    results = {}
    for scale in (1, 400):
        task = autotvm.task.create("test_no_gpu/vadd_salted", (256, random.random()), "cuda")
        # a build (nvcc, then the emulator's compile) takes well over 0.05 s
        opt = measure_option(LocalBuilder(timeout=0.05, n_parallel=1),
                             LocalRunner(timeout=0.05, number=1, repeat=1, cooldown_interval=0))
        with config.scope(TEMPLTUNE_CUDA_EMULATOR_TIMEOUT_SCALE=scale):
            batch = create_measure_batch(task, opt)
            try:
                assert opt["builder"].time_scale == scale == opt["runner"].time_scale
                results[scale] = batch([MeasureInput(task.target, task,
                                                     task.config_space.get(0))])[0]
            finally:
                batch.close()
    assert results[1].error_no == MeasureErrorNo.BUILD_TIMEOUT
    assert "timeout x" not in results[1].error_detail
    assert results[400].error_no == MeasureErrorNo.NO_ERROR, results[400].error_detail[:500]
    cpu = autotvm.task.create("test_no_gpu/vadd_salted", (256, 0.5), "llvm")
    runner = LocalRunner(timeout=3)
    try:
        runner.set_task(cpu)
        assert runner.time_scale == 1 and runner.effective_timeout == 3.0
    finally:
        runner.close()
