"""Shared helpers of the ``tests/test_lower_schedules_*.py`` hand-schedule tests: matmul and
conv2d workloads, and :func:`execute`, which runs a lowered function with the loop-IR interpreter
and cross-checks it against the LLVM build (CPU) or the CUDA emulator (GPU)."""

from __future__ import annotations

import numpy as np

import templtune
from templtune import te, topi
from templtune.lower.interp import run
from templtune.lower.ir import For, ForKind
from templtune.te.functor import post_order
from templtune.topi.testing import conv2d_nchw_python

RNG = np.random.default_rng(0)


def _rand(*shape: int) -> np.ndarray:
    return RNG.random(shape, dtype=np.float64).astype("float32")


def matmul(n: int = 12, m: int = 10, kk: int = 9):
    A = te.placeholder((n, kk), name="A")
    B = te.placeholder((kk, m), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def check_matmul(s, A, B, C) -> templtune.lower.ir.PrimFunc:
    f = templtune.lower(s, [A, B, C])
    n, kk = (int(x) for x in A.shape)
    m = int(B.shape[1])
    a, b = _rand(n, kk), _rand(kk, m)
    c = np.zeros((n, m), "float32")
    execute(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    return f


def _has_threads(f) -> bool:
    return any(isinstance(n, For) and n.kind is ForKind.THREAD_BINDING for n in post_order(f.body))


def emulate_gpu(f, *arrays: np.ndarray) -> bool:
    """Run ``f`` under GPU semantics (threads in lockstep, race detection) with the CUDA
    emulator when it is available; False when it is not."""
    try:
        from templtune.runtime.cuda.emulate import emulate
    except ImportError:  # pragma: no cover - CUDA backend not present
        return False
    emulate(f, *arrays)
    return True


def execute(f, *arrays: np.ndarray, gpu: bool = True) -> None:
    """Run ``f`` with the interpreter (writing ``arrays``); also build CPU functions with the
    LLVM backend and run GPU functions in the CUDA emulator, checking they compute the same."""
    copies = [a.copy() for a in arrays]
    run(f, *arrays)
    if _has_threads(f):
        if gpu and emulate_gpu(f, *copies):
            for x, y in zip(arrays, copies):
                np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)
        return
    try:
        mod = templtune.build(f, target="llvm")
    except ImportError:  # pragma: no cover - backend not installed
        return
    mod(*copies)
    for x, y in zip(arrays, copies):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)


def kinds(f) -> list[ForKind]:
    return [n.kind for n in post_order(f.body) if isinstance(n, For)]


def _conv(n, ci, h, w, co, k, stride, pad):
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, k, k), name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, stride, pad, dilation=1, out_dtype="float32")
    return data, kernel, out


def _check_conv(s, data, kernel, out, stride, pad):
    f = templtune.lower(s, [data, kernel, out])
    d = _rand(*(int(x) for x in data.shape))
    w = _rand(*(int(x) for x in kernel.shape))
    o = np.zeros(tuple(int(x) for x in out.shape), "float32")
    execute(f, d, w, o)
    np.testing.assert_allclose(o, conv2d_nchw_python(d, w, stride, pad), rtol=1e-4, atol=1e-5)
    return f
