"""Shared workloads and checks of the ``tests/test_symbolic_shapes_*.py`` tests: a vector add
and a matmul over ``te.var`` extents, run at several sizes against numpy."""

from __future__ import annotations

import numpy as np

import templtune as tvm
import templtune.testing
from templtune import te

SIZES = (1024, 1, 63, 1000, 0)


def _vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    return A, B, C


def _check_sizes(f, dev, sizes=SIZES):
    rng = np.random.default_rng(0)
    for n in sizes:
        a = tvm.nd.array(rng.uniform(size=n).astype("float32"), dev)
        b = tvm.nd.array(rng.uniform(size=n).astype("float32"), dev)
        c = tvm.nd.array(np.zeros(n, dtype="float32"), dev)
        f(a, b, c)
        tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())


def _matmul():
    n, m, ln = te.var("n"), te.var("m"), te.var("l")
    A = te.placeholder((n, ln), name="A")
    B = te.placeholder((ln, m), name="B")
    k = te.reduce_axis((0, ln), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _run_matmul(f, shapes):
    rng = np.random.default_rng(1)
    for n, m, ln in shapes:
        a = rng.standard_normal((n, ln)).astype("float32")
        b = rng.standard_normal((ln, m)).astype("float32")
        c = np.full((n, m), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
