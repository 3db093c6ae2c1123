"""Configs over the target's per-block limits are pruned from the CUDA conv2d space before
measurement; the oracle is the CUDA backend's own resource check (``precheck``) on the
lowered IR of each sampled config."""

from __future__ import annotations

import dataclasses
import importlib
import re

import numpy as np
import pytest

from templtune import autotvm, te
from templtune.autotvm.space import ConfigEntity, ConfigSpace
from templtune.codegen.cuda.build import CudaLimits, limits_from_target, precheck
from templtune.errors import InstantiationError
from templtune.lower.lower_api import lower
from templtune.target import Target

SEED = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
SEED_RANGE = 10454400  # the unpruned product space of the seed conv2d


def _task(target="cuda"):
    importlib.import_module("templtune.templates.cuda.conv2d_nchw")
    return autotvm.task.create("tutorial/conv2d_no_batching", SEED, target)


def _precheck(task, index, lim):
    """The backend's verdict on config ``index`` (empty: within the limits)."""
    space = task.config_space
    cfg = ConfigEntity(index, None, space._entities_at(index), [])
    with Target(str(task.target)):
        s, args = task.instantiate(cfg)
    try:
        precheck(lower(s, args, "default_function"), lim)
    except InstantiationError as exc:
        return str(exc)
    return ""


def test_seed_space_is_pruned_to_configs_within_the_limits():
    task = _task()
    space = task.config_space
    assert space.range_length == SEED_RANGE
    assert 0 < len(space) < SEED_RANGE // 4
    lim = limits_from_target(task.target)
    rng = np.random.default_rng(0)
    for i in space.sample_ints(16, rng=rng):
        assert _precheck(task, int(i), lim) == "", int(i)
    # and the pruning is not too eager: what it drops, the backend rejects as well
    dropped = np.flatnonzero(~space._valid_all())
    for i in rng.choice(dropped, 12, replace=False):
        assert re.search(r"threads per block|shared memory|words per thread|per block",
                         _precheck(task, int(i), lim)), int(i)


def test_pruning_follows_the_target_limits():
    full, small = _task(), _task("cuda -max_threads_per_block=128")
    assert len(small.config_space) < len(full.config_space)
    lim = limits_from_target(small.target)
    assert lim.max_threads_per_block == 128
    for i in small.config_space.sample_ints(6, rng=np.random.default_rng(1)):
        assert _precheck(small, int(i), lim) == ""


def test_filter_table_matches_the_pointwise_filter():
    space = _task().config_space
    valid = space._valid_all()
    rng = np.random.default_rng(2)
    for i in rng.choice(space.range_length, 3000, replace=False):
        assert bool(valid[i]) == space._compute_valid(int(i)), int(i)


def test_words_limit_is_the_backends():
    mod = importlib.import_module("templtune.templates.cuda.conv2d_nchw")
    assert mod.MAX_LOCAL_WORDS == CudaLimits().max_local_words_per_thread


@pytest.mark.parametrize("with_table", [False, True])
def test_multi_filter_with_knobs_counts_like_point_by_point(with_table):
    A = te.placeholder((64, 48), name="A")
    B = te.compute((64, 48), lambda i, j: A[i, j], name="B")

    def build(knobs):
        s = ConfigSpace()
        y, x = B.op.axis
        s.define_split("a", y, num_outputs=3)
        s.define_knob("k", [0, 1, 2])
        s.define_split("b", x, num_outputs=2)

        def f(e):
            return e["a"].size[1] * e["b"].size[1] <= 16 + e["k"].val

        if with_table:
            f.table = lambda b, k, a: np.array(  # type: ignore[attr-defined]
                [[[f({"a": a[ia], "b": b[ib], "k": k[ik]}) for ia in range(len(a))]
                  for ik in range(len(k))] for ib in range(len(b))])
        s.multi_filter(f, knobs=knobs)
        s.multi_filter(lambda e: e["a"].size[0] != 2, knobs=None if knobs is None else ("a",))
        return s

    fast, slow = build(("b", "k", "a")), build(None)
    assert fast.range_length == slow.range_length == 840
    assert len(fast) == len(slow) and 0 < len(fast) < 840
    assert list(np.flatnonzero(fast._valid_all())) == [
        i for i in range(840) if slow.is_index_valid(i)]


def test_precheck_oracle_reports_over_limit_configs():
    # the oracle itself: with no shared memory allowed every config is rejected
    task = _task()
    lim = dataclasses.replace(limits_from_target(task.target), max_shared_memory_per_block=0)
    i = int(task.config_space.sample_ints(1, rng=np.random.default_rng(3))[0])
    assert "shared memory" in _precheck(task, i, lim)
