"""Property: every legal config of the x86 GEMM templates (``dense``, plain and prepacked,
and ``batch_matmul``) computes what numpy computes, over random shapes whose row counts
include primes above the 256-row tile limit (the wide tile of templates/x86/row_blocks.py)
and whose ``batch_matmul`` column counts include ones no whole vector divides (padded tiles),
for the AVX2 family and for the host's own."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import templtune
from templtune import autotvm
from templtune.autotvm import strategy
from templtune.target import Target

strategy.load_templates()

#: row counts: small, exact-split friendly, prime under and above the tile limit
ROWS = st.one_of(st.integers(1, 40), st.sampled_from([96, 197, 257, 263, 577]))
#: "llvm" is the host; haswell is the AVX2 family, which every x86-64 host here runs
TARGETS = st.sampled_from(["llvm", "llvm -mcpu=haswell"])


def _run(name: str, args: tuple, index: int, target: str
         ) -> tuple[np.ndarray, np.ndarray, autotvm.task.space.ConfigEntity]:
    rng = np.random.default_rng(index)
    with Target(target):
        task = autotvm.task.create(name, args, target)
        space = task.config_space
        valid = [i for i in range(space.range_length) if space.is_index_valid(i)]
        cfg = space.get(valid[index % len(valid)])
        with autotvm.ApplyConfig(cfg):
            sch, tensors = task.func(*args)
    mod = templtune.build(sch, tensors, target=target)
    if name == "dense":
        m, n, k = args[:3]
        a, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((n, k), np.float32)
        want = a @ w.T
        pb = args[3] if len(args) > 3 else 0
        wi = np.ascontiguousarray(w.reshape(n // pb, pb, k).transpose(0, 2, 1)) if pb else w
    else:
        b, m, n, k = args
        a, wi = (rng.standard_normal((b, m, k), np.float32),
                 rng.standard_normal((b, n, k), np.float32))
        want = a @ wi.transpose(0, 2, 1)
    out = np.zeros(want.shape, np.float32)
    mod(a, wi, out)
    return out, want, cfg


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=ROWS, n=st.sampled_from([8, 16, 24, 40, 64]), k=st.integers(1, 48),
       prepacked=st.sampled_from([0, 8]), index=st.integers(0, 10_000), target=TARGETS)
def test_dense_configs_match_numpy(m, n, k, prepacked, index, target):
    args = (m, n, k, prepacked) if prepacked else (m, n, k)
    out, want, cfg = _run("dense", args, index, target)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=f"{args} {cfg}")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=st.integers(1, 3), m=ROWS, n=st.sampled_from([8, 16, 20, 37, 197]),
       k=st.integers(1, 24),
       index=st.integers(0, 10_000), target=TARGETS)
def test_batch_matmul_configs_match_numpy(b, m, n, k, index, target):
    out, want, cfg = _run("batch_matmul", (b, m, n, k), index, target)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=f"{(b, m, n, k)} {cfg}")
