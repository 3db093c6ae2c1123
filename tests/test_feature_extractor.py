"""FeatureExtractor: cache, process pool == in-process, failures give zero rows."""

from __future__ import annotations

import numpy as np
from test_feature_itervar import gemm
from test_xgb_fixtures import SynthTask, records

from templtune.autotvm.feature import FeatureExtractor, config_feature
from templtune.lower.ir import ForKind

_KINDS = (ForKind.SERIAL, ForKind.VECTORIZED, ForKind.UNROLLED, ForKind.PARALLEL)


def fake_lower(task, config):
    """A GEMM whose shape and loop kinds follow the knobs; knob k3 == 0 fails."""
    k = config.get_other_option()
    if k["k3"] == 0:
        raise RuntimeError("invalid config")
    return gemm(n=4 * (k["k0"] + 1), m=2 * (k["k1"] + 1), k=k["k2"] + 1,
                inner=_KINDS[k["k3"] % 4], outer=_KINDS[(k["k3"] // 4) % 4])


def test_itervar_extractor_pool_matches_serial():
    task = SynthTask()
    idx = list(range(0, 4000, 97))
    serial = FeatureExtractor(task, "itervar", n_workers=0, lower_fn=fake_lower)
    pooled = FeatureExtractor(task, "itervar", n_workers=2, min_parallel=4, lower_fn=fake_lower)
    try:
        a = serial.get(idx)
        b = pooled.get(idx)
        assert pooled._pool is not None
        np.testing.assert_array_equal(a, b)
        # 3 loops x (18 + 6*5) itervar values + 4 knob values
        assert a.shape == (len(idx), 3 * 48 + 4)
        failed = [n for n, i in enumerate(idx) if task.config_space.point2knob(i)[3] == 0]
        assert failed and not a[failed].any()
        ok = [n for n in range(len(idx)) if n not in failed]
        assert a[ok].any(axis=1).all()
        # cached: a second call computes nothing
        n = pooled.n_computed
        np.testing.assert_array_equal(pooled.get(idx[::-1]), b[::-1])
        assert pooled.n_computed == n and pooled.seconds > 0
        # width is honoured
        assert pooled.get(idx[:3], width=10).shape == (3, 10)
    finally:
        pooled.close()


def test_curve_and_knob_features():
    task = SynthTask()
    cfg = task.config_space.get(5)
    cfg_ok = task.config_space.get(task.config_space.knob2point([1, 2, 3, 4]))
    assert config_feature(task, cfg_ok, "curve", 20, fake_lower).shape == (480,)
    np.testing.assert_array_equal(config_feature(task, cfg, "knob"),
                                  np.asarray(task.config_space.point2knob(5), np.float32))
    ext = FeatureExtractor(task, "curve", n_workers=0, lower_fn=fake_lower)
    recs = records(task, [cfg_ok.index, 5])
    pairs = ext.get_pairs([(inp.task, inp.config) for inp, _ in recs])
    assert pairs.shape == (2, 480) and not pairs[1].any() and pairs[0].any()


def test_knob_fast_path_matches_configs():
    task = SynthTask()
    space = task.config_space
    idx = list(range(0, len(space), 131))
    ext = FeatureExtractor(task, "knob", n_workers=0)
    fast = ext.get(idx)
    assert ext._knob_table not in (None, False)
    slow = np.stack([config_feature(task, space.get(i), "knob") for i in idx])
    np.testing.assert_array_equal(fast, slow)
    assert ext.get(idx, width=2).shape == (len(idx), 2)
    # with a filter that rejects index 0 the fast table cannot be built: slow path, same values
    filt = SynthTask()
    filt.config_space.multi_filter(lambda e: e["k0"].val > 0)
    ext2 = FeatureExtractor(filt, "knob", n_workers=0)
    ok = [i for i in idx if filt.config_space.is_index_valid(i)]
    np.testing.assert_array_equal(ext2.get(ok), slow[[idx.index(i) for i in ok]])


def lower_maybe_flat(task, config):
    """Like fake_lower, but when k1 == 0 the j loop is absent (a unit loop removed)."""
    from templtune.lower.ir import For, PrimFunc

    f = fake_lower(task, config)
    if config.get_other_option()["k1"] != 0:
        return f
    j_loop = f.body.body
    return PrimFunc(f.name, f.params, For(f.body.loop_var, f.body.min, f.body.extent,
                                          f.body.kind, j_loop.body))


def test_itervar_columns_align_by_loop_name():
    task = SynthTask()
    space = task.config_space
    full = space.knob2point([1, 3, 2, 5])
    flat = space.knob2point([1, 0, 2, 5])
    ext = FeatureExtractor(task, "itervar", n_workers=0, lower_fn=lower_maybe_flat)
    x = ext.get([flat, full])
    col = ext.columns
    assert x.shape[1] == len(col) == 3 * 48 + 4
    # the k loop has the same extent in both configs and sits in the same column
    assert x[0, col["k.extent"]] == x[1, col["k.extent"]] == np.log2(3 + 1)
    assert x[0, col["j.extent"]] == 0 and x[1, col["j.extent"]] > 0
    # nest level differs (2 vs 3) but stays in its named column
    assert (x[0, col["k.nest_level"]], x[1, col["k.nest_level"]]) == (2, 3)
    # knob values keep their own columns
    assert x[0, col["knob.1"]] == 0 and x[1, col["knob.1"]] == 3
