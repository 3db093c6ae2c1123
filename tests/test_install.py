"""What the core install carries: libgomp found in xgboost-cpu's own files, parallel kernels
and the demo path without scikit-learn, the optional scikit-learn cost model's clear error, and
the packaging metadata (extras, ``py.typed``)."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import templtune
from templtune.codegen.llvm import compile as cc

ROOT = Path(templtune.__file__).resolve().parent.parent


def _python(code: str, tmp_path: Path, hide: tuple[str, ...] = (),
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` on this checkout with the packages ``hide`` made unimportable."""
    fake = tmp_path / "hidden"
    for name in hide:
        (fake / name).mkdir(parents=True, exist_ok=True)
        (fake / name / "__init__.py").write_text(f"raise ImportError('No module named {name}')\n")
    full = dict(os.environ, **(env or {}))
    if "TEMPLTUNE_LIBGOMP" not in (env or {}):
        full.pop("TEMPLTUNE_LIBGOMP", None)  # the default lookup, whatever the caller set
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(fake)])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=600)


def test_libgomp_comes_from_xgboost_cpu_files():
    path = cc._bundled_libgomp("xgboost-cpu")
    assert path is not None and os.path.isfile(path)
    assert "xgboost" in path and os.path.basename(path).startswith("libgomp")
    if not os.environ.get("TEMPLTUNE_LIBGOMP"):
        assert cc.find_libgomp() == path
    found = cc._libgomp_next_to_xgboost()  # the fallback without a RECORD file
    assert found is not None and os.path.samefile(found, path)


def test_parallel_kernel_runs_without_scikit_learn(tmp_path):
    p = _python("""
        import sys
        import numpy as np
        import templtune
        from templtune import te
        from templtune.codegen.llvm import compile as cc
        n = 256
        A = te.placeholder((n, n), name="A")
        B = te.compute((n, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        s = te.create_schedule(B.op)
        s[B].parallel(s[B].op.axis[0])
        f = templtune.build(s, [A, B], target="llvm -num-cores=2")
        a = np.random.rand(n, n).astype("float32")
        b = np.zeros((n, n), "float32")
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
        assert "sklearn" not in sys.modules
        print("GOMP", cc.find_libgomp(), cc.load_libgomp())
    """, tmp_path, hide=("sklearn",))
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("GOMP"))
    assert "scikit_learn" not in line and line.endswith("True")


def test_a_missing_libgomp_override_is_a_clear_error(tmp_path):
    p = _python("""
        from templtune.codegen.llvm import compile as cc
        from templtune.errors import CodegenError
        try:
            cc.find_libgomp()
        except CodegenError as exc:
            print("ERR", exc)
    """, tmp_path, env={"TEMPLTUNE_LIBGOMP": str(tmp_path / "nope.so")})
    assert p.returncode == 0, p.stderr
    assert "ERR TEMPLTUNE_LIBGOMP=" in p.stdout and "no such file" in p.stdout


def test_sklearn_cost_model_without_scikit_learn_says_how_to_install(tmp_path):
    p = _python("""
        from templtune import autotvm
        from templtune.autotvm.tuner import SklearnCostModel
        from templtune.templates import load
        load("x86")
        task = autotvm.task.create("dense", (4, 16, 8), "llvm")
        try:
            SklearnCostModel(task)
        except ImportError as exc:
            print("ERR", exc)
    """, tmp_path, hide=("sklearn",))
    assert p.returncode == 0, p.stderr
    assert "ERR SklearnCostModel needs scikit-learn" in p.stdout
    assert "pip install 'templtune[sklearn]'" in p.stdout


def test_core_requirements_and_extras():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    core = cfg["options"]["install_requires"]
    assert "scikit-learn" not in core and "matplotlib" not in core
    extras = cfg["options.extras_require"]
    assert "scikit-learn" in extras["sklearn"]
    assert "matplotlib" in extras["plot"]
    assert "ray[client]" in extras["distributed"]  # the ray:// address form needs the client
    readme = (ROOT / "README.md").read_text()
    for extra in ("sklearn", "plot", "distributed", "onnx", "cuda", "test"):
        assert f"[{extra}]" in readme, extra


def test_py_typed_is_shipped():
    assert (ROOT / "templtune" / "py.typed").is_file()
    assert '"templtune": ["py.typed"]' in (ROOT / "setup.py").read_text()


@pytest.mark.slow
def test_built_wheel_carries_py_typed_and_no_scikit_learn(tmp_path):
    import shutil
    import zipfile

    # NOTE: setuptools builds in the source folder (build/, *.egg-info): build a copy of what
    # the package is made of, never in the checkout.
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "templates")  # templtune/templates: a symlink
    shutil.copytree(ROOT / "templtune", src / "templtune", ignore=skip)
    shutil.copytree(ROOT / "templates", src / "templates",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "dist"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(out), str(src)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    (wheel,) = out.glob("templtune-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "templtune/py.typed" in names
    assert "templtune/cli/report/page.py" in names
    assert "templtune/templates/logs/cpu/x86.log" in names
    assert "templtune/templates/logs/cpu/x86_avx512.log" in names
    requires = [x for x in meta.splitlines() if x.startswith("Requires-Dist:")]
    core = [x for x in requires if "extra ==" not in x]
    assert not any("scikit-learn" in x or "matplotlib" in x for x in core), core
    assert any("scikit-learn" in x and 'extra == "sklearn"' in x for x in requires)
