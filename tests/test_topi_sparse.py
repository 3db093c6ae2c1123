"""topi.nn.sparse_dense (BSR weight) against numpy, for random block-sparse matrices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import te, topi
from templtune.topi.sparse import dense_to_bsr, random_bsr_matrix
from templtune.topi.testing import bsr_to_dense, sparse_dense_python


def _run(x: np.ndarray, bsr, max_blocks: int | None) -> np.ndarray:
    xt = te.placeholder(x.shape, name="X")
    d = te.placeholder(bsr.data.shape, name="W_data")
    i = te.placeholder(bsr.indices.shape, dtype="int32", name="W_indices")
    p = te.placeholder(bsr.indptr.shape, dtype="int32", name="W_indptr")
    y = topi.nn.sparse_dense(xt, d, i, p, max_blocks_per_row=max_blocks)
    s = te.create_schedule(y.op)
    f = templtune.build(s, [xt, d, i, p, y], target="llvm")
    dev = templtune.cpu()
    out = templtune.nd.array(np.zeros(tuple(int(v) for v in y.shape), "float32"), dev)
    f(*(templtune.nd.array(a, dev) for a in (x, bsr.data, bsr.indices, bsr.indptr)), out)
    return out.numpy()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(m=st.integers(1, 4), rows=st.integers(1, 4), cols=st.integers(1, 4),
       bs_r=st.sampled_from([1, 2, 4]), bs_c=st.sampled_from([1, 2, 3]),
       density=st.floats(0.0, 1.0), empty_row=st.booleans(), seed=st.integers(0, 2**16))
def test_sparse_dense_matches_numpy(m, rows, cols, bs_r, bs_c, density, empty_row, seed):
    rng = np.random.default_rng(seed)
    n, k = rows * bs_r, cols * bs_c
    w = random_bsr_matrix(n, k, bs_r, bs_c, density, "float32", rng=rng).todense()
    if empty_row:
        w[:bs_r] = 0.0                          # a block row with no block at all
    bsr = dense_to_bsr(w, bs_r, bs_c)
    np.testing.assert_array_equal(bsr_to_dense(bsr.data, bsr.indices, bsr.indptr, k), w)
    x = rng.standard_normal((m, k)).astype("float32")
    got = _run(x, bsr, bsr.max_blocks_per_row)
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sparse_dense_python(x, bsr.data, bsr.indices, bsr.indptr),
                               x @ w.T, rtol=1e-5, atol=1e-5)


def test_default_extent_covers_every_row():
    rng = np.random.default_rng(3)
    w = random_bsr_matrix(8, 12, 2, 3, 0.6, "float32", rng=rng).todense()
    bsr = dense_to_bsr(w, 2, 3)
    x = rng.standard_normal((2, 12)).astype("float32")
    np.testing.assert_allclose(_run(x, bsr, None), x @ w.T, rtol=1e-5, atol=1e-5)


def test_bad_shapes_raise():
    x = te.placeholder((2, 5), name="X")
    d = te.placeholder((3, 2, 2), name="D")
    i = te.placeholder((3,), dtype="int32", name="I")
    p = te.placeholder((3,), dtype="int32", name="P")
    with pytest.raises(templtune.errors.ExprError, match="multiple of the block width"):
        topi.nn.sparse_dense(x, d, i, p)
    with pytest.raises(templtune.errors.ExprError, match="indices"):
        topi.nn.sparse_dense(te.placeholder((2, 4), name="X"), d,
                             te.placeholder((2,), dtype="int32", name="I"), p)
