"""Modules as system files: ``save`` (.o/.ll/.s), ``export_library`` (an ELF shared library),
``imported_modules``, and loading in a fresh process by ``load_module`` and by ctypes.

The TE tutorial's flow is run as written: ``save("myadd.o")``, ``cc.create_shared``,
``runtime.load_module("myadd.so")``. Oracles: numpy, the ELF magic, ``nm`` symbols, ctypes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import templtune
from templtune import config, te
from templtune.codegen.llvm.abi import ParallelRuntime
from templtune.contrib import cc, utils

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 1024


@pytest.fixture(scope="module", params=["templtune", "gomp"])
def fadd(request):
    A = te.placeholder((N,), name="A")
    B = te.placeholder((N,), name="B")
    C = te.compute((N,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, _ = s[C].split(C.op.axis[0], factor=64)
    # a parallel kernel: the library carries templtune's pool or must resolve libgomp
    s[C].parallel(xo)
    with config.scope(thread_pool=request.param):
        return templtune.build(s, [A, B, C], "llvm -num-cores=2", name="myadd")


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


_CHECK = """
    import ctypes, sys, numpy as np
    import templtune
    path = sys.argv[1] if len(sys.argv) > 1 else {path!r}
    m = templtune.runtime.load_module(path)
    rng = np.random.default_rng(0)
    a = rng.random({n}, dtype="float32"); b = rng.random({n}, dtype="float32")
    c = np.zeros({n}, "float32")
    m(a, b, c)
    assert np.allclose(c, a + b), "load_module: wrong result"
    lib = ctypes.CDLL(path)
    c2 = np.zeros({n}, "float32")
    ptr = lambda x: x.ctypes.data_as(ctypes.c_void_p)
    lib.myadd(ptr(a), ptr(b), ptr(c2))
    assert np.allclose(c2, a + b), "ctypes: wrong result"
    print("ok", m.entry_name)
"""


def test_tutorial_save_cc_create_shared_load(fadd) -> None:
    temp = utils.tempdir()
    fadd.save(temp.relpath("myadd.o"))
    cc.create_shared(temp.relpath("myadd.so"), [temp.relpath("myadd.o")])
    assert sorted(temp.listdir()) == ["myadd.o", "myadd.so"]
    with open(temp.relpath("myadd.o"), "rb") as f:
        assert f.read(4) == b"\x7fELF"
    proc = _fresh(_CHECK.format(path=temp.relpath("myadd.so"), n=N))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok myadd"


def test_export_library_is_a_loadable_elf_shared_object(fadd, tmp_path) -> None:
    path = str(tmp_path / "myadd_pack.so")
    fadd.export_library(path)
    with open(path, "rb") as f:
        head = f.read(18)
    assert head[:4] == b"\x7fELF" and head[16] == 3  # e_type ET_DYN: a shared object
    syms = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                          check=True).stdout.split()
    assert "myadd" in syms and "__templtune_module_blob" in syms
    undefined = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True,
                               text=True, check=True).stdout
    # the pool's library needs no libgomp
    assert ("GOMP_parallel" in undefined) == (fadd._runtime is ParallelRuntime.GOMP)
    proc = _fresh(_CHECK.format(path=path, n=N))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok myadd"


def test_export_library_with_fcompile(fadd, tmp_path) -> None:
    seen = []

    def fcompile(output, objects, options):
        seen.append(len(objects))
        cc.create_shared(output, objects, options)

    path = str(tmp_path / "via_cc.so")
    fadd.export_library(path, fcompile=fcompile)
    # the code object, the module description and, for templtune's pool, the pool
    assert seen == [2 if fadd._runtime is ParallelRuntime.GOMP else 3]
    m = templtune.runtime.load_module(path)
    a, b = np.ones(N, "float32"), np.full(N, 2.0, "float32")
    c = np.zeros(N, "float32")
    m(a, b, c)
    np.testing.assert_allclose(c, 3.0)


def test_save_text_formats_and_errors(fadd, tmp_path) -> None:
    fadd.save(str(tmp_path / "myadd.ll"))
    fadd.save(str(tmp_path / "myadd.s"))
    assert 'define i32 @"myadd"' in (tmp_path / "myadd.ll").read_text()
    assert "myadd" in (tmp_path / "myadd.s").read_text()
    with pytest.raises(ValueError, match="bc"):
        fadd.save(str(tmp_path / "myadd.bc"))
    other = tmp_path / "plain.so"
    obj = tmp_path / "x.o"
    (tmp_path / "x.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-c", "-fPIC", "-o", str(obj), str(tmp_path / "x.c")], check=True)
    cc.create_shared(str(other), [str(obj)])
    with pytest.raises(templtune.errors.CodegenError, match="not a templtune module"):
        templtune.runtime.load_module(str(other))


def test_imported_modules(fadd) -> None:
    assert fadd.imported_modules == []
    from templtune.codegen.cuda import examples as ex
    from templtune.runtime.cuda.module import build_cuda

    dev = build_cuda(ex.vector_add(n=1000, threads=64)[0], compile=False)
    assert dev.imported_modules[0] is dev
    assert "__global__" in dev.imported_modules[0].get_source()
