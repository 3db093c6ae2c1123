"""Logging under TVM's logger names: the tutorials' ``logging.getLogger("autotvm")`` lines turn on
per-trial output, ``"auto_scheduler"`` receives what the auto-scheduler logs, and the library
itself configures nothing. Each case runs in a fresh interpreter so that no handler or level set
by another test can leak in."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_TUNE = """
    import logging, sys
    from templtune import autotvm, te
    from templtune.measure.fake import FakeBuilder, FakeRunner

    @autotvm.template("test_tvm_logging/gemm")
    def gemm(n):
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        y, x = s[C].op.axis
        cfg = autotvm.get_config()
        cfg.define_split("tile_y", y, num_outputs=2)
        cfg.define_split("tile_x", x, num_outputs=2)
        return s, [A, B, C]

    task = autotvm.task.create("test_tvm_logging/gemm", args=(64,), target="llvm")
    {setup}
    tuner = autotvm.tuner.RandomTuner(task)
    tuner.tune(n_trial=6, measure_option=autotvm.measure_option(
        builder=FakeBuilder(n_parallel=2), runner=FakeRunner(seed=0)))
    {after}
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def test_tutorial_logging_lines_print_every_trial() -> None:
    setup = ('logging.getLogger("autotvm").setLevel(logging.DEBUG)\n'
             '    logging.getLogger("autotvm").addHandler(logging.StreamHandler(sys.stdout))')
    proc = _run(_TUNE.format(setup=setup, after=""))
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("No: ")]
    assert [int(ln.split()[1]) for ln in lines] == [1, 2, 3, 4, 5, 6], proc.stdout
    assert all("GFLOPS: " in ln and "result: " in ln for ln in lines)


def test_library_configures_no_logging() -> None:
    after = ('assert [logging.getLogger(n).handlers for n in ("autotvm", "auto_scheduler", "")]'
             ' == [[], [], []]\n'
             '    assert logging.getLogger("autotvm").level == logging.NOTSET\n'
             '    print("clean")')
    proc = _run(_TUNE.format(setup="", after=after))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "clean"
    assert "No: " not in proc.stdout + proc.stderr


def test_auto_scheduler_logger_name(tmp_path) -> None:
    missing = tmp_path / "missing.json"
    proc = _run(f"""
        import logging, sys
        logging.getLogger("auto_scheduler").addHandler(logging.StreamHandler(sys.stdout))
        from templtune import auto_scheduler
        auto_scheduler.RecordReader({str(missing)!r})
    """)
    assert proc.returncode == 0, proc.stderr
    assert f"record file {missing} does not exist" in proc.stdout
