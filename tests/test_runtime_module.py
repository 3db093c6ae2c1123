"""Runtime: argument checks, nd arrays, time evaluator semantics, export/load across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import templtune.runtime.ndarray as nd
from templtune.build_module import build
from templtune.codegen.llvm.testing import elementwise, matmul
from templtune.errors import RuntimeCallError
from templtune.runtime import load_module
from templtune.te.expr import BinOpKind, binary

RNG = np.random.default_rng(2)


@pytest.fixture(scope="module")
def vadd():
    return build(elementwise(lambda a, b: binary(BinOpKind.ADD, a, b), ["float32", "float32"],
                             "float32", 64, lanes=16, name="vadd"))


def _args(n=64):
    return (RNG.random(n, dtype="float32"), RNG.random(n, dtype="float32"),
            np.zeros(n, "float32"))


def test_call_and_entry_name(vadd):
    a, b, c = _args()
    vadd(a, b, c)
    np.testing.assert_allclose(c, a + b)
    assert vadd.entry_name == "vadd"
    assert vadd["vadd"] is vadd and vadd.get_function("vadd") is vadd


@pytest.mark.parametrize("bad,match", [
    (lambda a, b, c: (a, b), "expects 3 arguments"),
    (lambda a, b, c: (a, b, c, c), "expects 3 arguments"),
    (lambda a, b, c: (a, b, np.zeros(63, "float32")), r"argument 2 \(C\).*shape"),
    (lambda a, b, c: (a, b, np.zeros((8, 8), "float32")), r"argument 2 \(C\).*dimensions"),
    (lambda a, b, c: (a.astype("float64"), b, c), r"argument 0 \(A0\).*dtype float64"),
    (lambda a, b, c: (np.zeros(128, "float32")[::2], b, c), "C-contiguous"),
    (lambda a, b, c: (list(a), b, c), "numpy array"),
])
def test_bad_calls_raise(vadd, bad, match):
    with pytest.raises(RuntimeCallError, match=match):
        vadd(*bad(*_args()))


@pytest.mark.parametrize("bad,match", [
    (lambda a, b, c: (a, b), "expects 3 arguments"),
    (lambda a, b, c: (a, b, np.zeros(63, "float32")), r"argument 2 \(C\).*shape"),
])
def test_bind_checks_once_then_replays(vadd, bad, match):
    with pytest.raises(RuntimeCallError, match=match):
        vadd.bind(*bad(*_args()))
    a, b, c = _args()
    run = vadd.bind(a, b, c)
    run()
    np.testing.assert_allclose(c, a + b)
    a += 1.0  # the bound call reads the arrays as they are when it runs
    run()
    np.testing.assert_allclose(c, a + b)


def test_nd_arrays_accepted(vadd):
    a, b, _ = _args()
    dev = nd.cpu(0)
    x, y, z = nd.array(a, dev), nd.array(b, dev), nd.empty((64,), "float32", dev)
    vadd(x, y, z)
    np.testing.assert_allclose(z.numpy(), a + b)
    assert z.shape == (64,) and z.dtype == "float32" and str(z.device) == "cpu(0)"
    assert nd.device("llvm") == dev and nd.cuda(1).device_type == 2


def test_time_evaluator_basic(vadd):
    ev = vadd.time_evaluator(vadd.entry_name, nd.cpu(), number=5, repeat=4)
    r = ev(*_args())
    assert len(r.results) == 4 and all(t > 0 for t in r.results)
    assert r.numbers == (5, 5, 5, 5)
    assert r.mean == pytest.approx(np.mean(r.results)) and r.median > 0


def test_time_evaluator_min_repeat_ms_growth_carries_over(vadd):
    ev = vadd.time_evaluator("vadd", nd.cpu(), number=1, repeat=3, min_repeat_ms=20)
    r = ev(*_args())
    assert len(r.results) == 3
    assert r.numbers[0] > 1  # grown from 1
    assert list(r.numbers) == sorted(r.numbers)  # never shrinks: growth carries over
    for t, n in zip(r.results, r.numbers):
        assert t * n * 1e3 >= 20 * 0.999  # each round lasted at least min_repeat_ms


def test_time_evaluator_cache_flush_and_bad_name(vadd):
    r = vadd.time_evaluator("vadd", nd.cpu(), number=2, repeat=2, enable_cpu_cache_flush=True)(
        *_args())
    assert len(r.results) == 2
    with pytest.raises(AttributeError):
        vadd.time_evaluator("nope", nd.cpu())


def test_timer_is_native_and_cheap(vadd):
    # 20000 calls of a 64-element add must take far less than 20000 ctypes calls would
    r = vadd.time_evaluator("vadd", nd.cpu(), number=20000, repeat=1)(*_args())
    assert r.results[0] < 1e-6


def test_get_source_formats(vadd):
    assert 'define i32 @"vadd"' in vadd.get_source("ll")
    assert "vadd" in vadd.get_source("asm")
    assert "<16 x float>" in vadd.get_source("ll-opt")
    with pytest.raises(ValueError):
        vadd.get_source("ptx")


def test_export_load_same_process(vadd, tmp_path):
    data = vadd.export()
    t0 = time.perf_counter()
    m2 = load_module(data)
    load_s = time.perf_counter() - t0
    a, b, c = _args()
    m2(a, b, c)
    np.testing.assert_allclose(c, a + b)
    assert m2.get_source() == vadd.get_source()
    assert load_s < 0.5
    p = tmp_path / "vadd.ttmod"
    vadd.export_library(p)
    assert load_module(str(p)).entry_name == "vadd"


def test_export_load_in_subprocess(tmp_path):
    mod = build(matmul(9, 32, 16, lanes=16, unroll_k=2, parallel=True), target="llvm -num-cores=2")
    p = tmp_path / "mm.ttmod"
    p.write_bytes(mod.export())
    script = textwrap.dedent(f"""
        import time, numpy as np
        t0 = time.perf_counter()
        from templtune.runtime import load_module
        m = load_module({str(p)!r})
        rng = np.random.default_rng(0)
        a = rng.random((9, 16), dtype="float32"); b = rng.random((16, 32), dtype="float32")
        c = np.zeros((9, 32), "float32")
        m(a, b, c)
        assert np.allclose(c, a @ b, rtol=1e-5), "wrong result"
        r = m.time_evaluator(m.entry_name, None, number=3, repeat=2)(a, b, c)
        assert len(r.results) == 2
        print("OK", m.num_threads)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path),
                         env={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[1]),
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["OK", "2"]


def test_load_rejects_garbage():
    from templtune.errors import CodegenError

    with pytest.raises(CodegenError, match="magic"):
        load_module(b"not a module")


def test_forked_child_after_parallel_use_does_not_hang(tmp_path):
    script = textwrap.dedent("""
        import multiprocessing as mp, numpy as np
        from templtune.build_module import build
        from templtune.codegen.llvm.testing import matmul
        def job(_):
            m = build(matmul(8, 16, 8, lanes=16), target="llvm -num-cores=2")
            a = np.ones((8, 8), "float32"); b = np.ones((8, 16), "float32")
            c = np.zeros((8, 16), "float32")
            m(a, b, c)
            return float(c[0, 0])
        if __name__ == "__main__":
            assert job(0) == 8.0
            with mp.get_context("fork").Pool(1) as p:
                print("OK", p.map(job, [0]))
    """)
    path = tmp_path / "fork_job.py"
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[1]),
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK [8.0]"


def test_module_pickles_as_object_code(vadd):
    import pickle

    m2 = pickle.loads(pickle.dumps(vadd))
    a, b, c = _args()
    m2(a, b, c)
    np.testing.assert_allclose(c, a + b)


def test_module_for_a_cpu_the_host_cannot_run_raises_instead_of_sigill() -> None:
    """Building for another CPU is allowed (cross-compiling, export); calling it here is refused
    with a clear error instead of killing the interpreter with an illegal instruction."""
    import numpy as np

    import templtune
    from templtune import te
    from templtune.codegen.llvm import compile as cc
    from templtune.errors import RuntimeCallError

    host = cc.host_spec()
    other = "skylake-avx512" if host.cpu != "skylake-avx512" else "znver4"
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    f = templtune.build(s, [A, B], target=f"llvm -mcpu={other}")
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    if "avx512f" in {x[1:] for x in host.features.split(",") if x.startswith("+")}:
        f(a, b)  # the host has AVX-512: the module runs
        np.testing.assert_allclose(b, 2.0)
    else:
        with pytest.raises(RuntimeCallError, match="avx512f"):
            f(a, b)
        with pytest.raises(RuntimeCallError, match="avx512f"):
            f.time_evaluator(f.entry_name, templtune.cpu())(a, b)
    # the host's own CPU name always runs
    g = templtune.build(s, [A, B], target=f"llvm -mcpu={host.cpu}")
    g(a, b)
    np.testing.assert_allclose(b, 2.0)


@pytest.mark.parametrize("shape,dtype", [((1000, 3), "float32"), ((7,), "int64"), ((0, 4), "float32"),
                                         ((2, 3, 5), "bool")])
def test_aligned_copy_keeps_values_on_a_cache_line(shape, dtype):
    from templtune.runtime.aligned import ALIGN, aligned_copy

    a = (RNG.random(shape) * 10).astype(dtype)
    b = aligned_copy(a)
    assert b.shape == a.shape and b.dtype == a.dtype and b.flags.c_contiguous
    assert b.ctypes.data % ALIGN == 0 and not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)


def _add_kernel(target: str):
    from templtune import te

    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="b")
    return build(te.create_schedule(b.op), [a, b], target=target)


def test_tuning_flags_run_and_missing_isa_features_are_refused():
    """An LLVM tuning flag (``prefer-256-bit``) is no ISA feature: any host runs the code. An
    ISA feature the host lacks is refused by name, before the call could raise SIGILL."""
    from templtune.codegen.llvm.compile import host_spec

    x = RNG.random(64, dtype="float32")
    out = np.zeros(64, "float32")
    _add_kernel("llvm -mattr=+prefer-256-bit")(x, out)
    np.testing.assert_allclose(out, x + 1.0)
    absent = {f[1:] for f in host_spec().features.split(",") if f.startswith("-")}
    lacking = next((f for f in ("amx-tile", "avx512fp16", "avx512f", "avx2") if f in absent),
                   None)
    if lacking is None:
        pytest.skip("this host has every ISA feature tried")
    with pytest.raises(RuntimeCallError, match=lacking):
        _add_kernel(f"llvm -mattr=+{lacking}")(x, out)
