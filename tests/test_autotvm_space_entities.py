"""Knob entities: JSON round trip, features, repr, apply on a real schedule, and
FallbackConfigEntity (SPEC §1.2-§1.8)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune import te
from templtune.autotvm.space import ConfigEntity, ConfigSpace
from templtune.autotvm.task.fallback import FallbackConfigEntity
from templtune.autotvm.task.knobs import (
    AnnotateEntity,
    OtherOptionEntity,
    ReorderEntity,
    SplitEntity,
    VirtualAxis,
    entity_from_json,
)


def mixed_space() -> ConfigSpace:
    cfg = ConfigSpace()
    ax = [VirtualAxis(8, f"a{i}") for i in range(3)]
    cfg.define_split("tile", 64, num_outputs=3)
    cfg.define_reorder("re", ax, policy="all")
    cfg.define_annotate("ann", ax, policy="try_unroll_vec")
    cfg.define_annotate("loc", ax, policy="locate_cache", num_anchor=2)
    cfg.define_knob("unroll", [0, 512, 1500])
    cfg.define_knob("mode", ["fast", "slow"])
    return cfg


def test_json_round_trip_every_kind():
    cfg = mixed_space()
    for idx in (0, 1, 777, cfg.range_length - 1):
        c = cfg.get(idx)
        d = json.loads(json.dumps(c.to_json_dict()))
        assert [e[1] for e in d["entity"]] == ["sp", "re", "an", "an", "ot", "ot"]
        back = ConfigEntity.from_json_dict(d)
        assert back == c and back.index == idx and back.code_hash is None
        assert [back[k] for k in back] == [c[k] for k in c]
        assert repr(back) == repr(c)
    with pytest.raises(ValueError, match="unknown knob kind"):
        ConfigEntity.from_json_dict({"index": 0, "code_hash": None, "entity": [["x", "zz", 1]]})


@settings(max_examples=60, deadline=None)
@given(st.one_of(
    st.lists(st.integers(-1, 4096), min_size=1, max_size=5).map(lambda v: SplitEntity(v)),
    st.permutations(range(5)).map(lambda v: ReorderEntity(v)),
    st.lists(st.sampled_from(["none", "unroll", "vec", "fuse", "threadIdx.x"]), max_size=4)
      .map(lambda v: AnnotateEntity(v)),
    st.one_of(st.integers(), st.text(max_size=8), st.booleans(), st.none())
      .map(lambda v: OtherOptionEntity(v)),
))
def test_entity_json_property(ent):
    again = entity_from_json(ent.kind, json.loads(json.dumps(ent.to_json())))
    assert again == ent and type(again) is type(ent)


def test_repr_and_features():
    cfg = ConfigSpace()
    cfg.define_split("tile_x", 64, num_outputs=2)
    cfg.define_split("tile_y", 64, num_outputs=2)
    c = cfg.get(4 + 7 * 2)
    assert repr(c) == "[('tile_x', [-1, 16]), ('tile_y', [-1, 4])],None,18"
    assert c.get_flatten_feature().tolist() == [-1, 16, -1, 4]
    m = mixed_space().get(0)
    f = m.get_flatten_feature()
    assert f.dtype == np.float32
    # split 3 + perm 3 + 3 axes x 11 one-hot + 2 anchors + 2 knob values
    assert len(f) == 3 + 3 + 33 + 2 + 2
    assert f[6:17].tolist() == [1.0] + [0.0] * 10  # first axis: "none"
    assert m.get_other_option() == {"unroll": 0, "mode": "fast"}
    assert "('mode', fast)" in repr(m)


def test_config_entity_is_apply_mode():
    c = mixed_space().get(5)
    axes = c.define_split("tile", 64, num_outputs=3)
    assert [a.index for a in axes] == [0, 1, 2]
    assert c["tile"] == mixed_space().get(5)["tile"] and not c.is_fallback
    c.add_flop(10)
    assert c.flop == 10.0 and c.valid()
    c.raise_error("bad")
    assert not c.valid() and c.errors == ["bad"]


def test_fallback_split():
    cfg = FallbackConfigEntity()
    cfg.define_split("a", 128, num_outputs=3)
    cfg.fallback_split("a", [-1, 8, 4])
    assert cfg["a"].size == (4, 8, 4)
    cfg.define_split("a", 128, num_outputs=3)  # re-running the template keeps the value
    assert cfg["a"].size == (4, 8, 4)
    cfg.define_split("b", 49, num_outputs=3)
    cfg.fallback_split("b", [-1, 8, 4])
    assert cfg["b"].size == (7, 7, 1)
    with pytest.raises(RuntimeError):
        cfg.fallback_split("b", [-1, 1, 0])
    assert cfg.is_fallback
    cfg["k"] = OtherOptionEntity(3)
    assert cfg["k"].val == 3
    assert repr(cfg).endswith(",None")


def test_fallback_with_reference_log():
    from templtune.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult

    ref_space = ConfigSpace()
    ref_space.define_split("tile", 64, num_outputs=3)
    ref_space.define_knob("u", [0, 16])
    ref = ref_space.get(ref_space.knob2point([ref_space.space_map["tile"].entities.index(
        SplitEntity([-1, 4, 8])), 1]))
    res = MeasureResult((1.0,), MeasureErrorNo.NO_ERROR, 0.0, 0.0)
    cfg = FallbackConfigEntity()
    cfg.define_split("tile", 32, num_outputs=3)
    cfg.define_knob("u", [0, 16])
    cfg.fallback_with_reference_log([(MeasureInput("llvm", None, ref), res)])
    assert cfg["tile"].size == (1, 4, 8) and cfg["u"].val == 16
    empty = FallbackConfigEntity()
    empty.define_split("tile", 32, num_outputs=3)
    empty.fallback_with_reference_log([])
    assert empty["tile"].size == (-1, 1, 1)


# --- apply on a real schedule

def _matmul(n=64):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _extents(ivs):
    return [iv.dom.extent.value for iv in ivs]


def test_split_entity_apply_extents():
    A = te.placeholder((512,), name="A")
    B = te.compute((512,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    loops = SplitEntity([-1, 2, 4, 8]).apply(s, B, B.op.axis[0])
    assert len(loops) == 4
    assert [lp.dom.extent.value for lp in s[B].leaf_iter_vars] == [8, 2, 4, 8]


def test_reorder_and_annotate_apply():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    k = C.op.reduce_axis[0]
    io, ii = SplitEntity([-1, 8]).apply(s, C, i)
    order = ReorderEntity([0, 3, 2, 1]).apply(s, C, [io, j, k, ii])
    assert s[C].leaf_iter_vars == [io, ii, k, j]
    assert order == [io, ii, k, j]
    short = ReorderEntity([2, 0, 3, 1]).apply(s, C, [io, ii, k])
    assert short == [k, io, ii]
    cfg = ConfigSpace()
    axes = AnnotateEntity(["unroll", "none", "vec"]).apply(
        s, C, [ii, io, j], axis_lens=[8, 8, 64], max_unroll=4, vec_size=[4, 8], cfg=cfg)
    assert axes == [ii, io, j]
    assert len(cfg.errors) == 2  # too large to unroll, bad vector width
    kinds = {iv.var.name: a.kind.name for iv, a in s[C].iter_var_attrs.items()}
    assert kinds == {"i.inner": "UNROLLED", "j": "VECTORIZED"}


def test_annotate_fuse_and_bind():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=8)
    axes = AnnotateEntity(["fuse", "blockIdx.x", "threadIdx.x"]).apply(s, C, [io, ii, j])
    fused = axes[1]
    assert fused.dom.extent.value == 64 and fused in s[C].leaf_iter_vars
    binds = {iv.var.name: a.bind_thread.thread_tag for iv, a in s[C].iter_var_attrs.items()
             if a.bind_thread is not None}
    assert sorted(binds.values()) == ["blockIdx.x", "threadIdx.x"]


def test_axis_wrapping_from_itervars():
    _, _, C = _matmul(48)
    cfg = ConfigSpace()
    y, x = C.op.axis
    out = cfg.define_split("tile_y", y, num_outputs=3)
    assert len(out) == 3 and out[0].space is cfg.space_map["tile_y"]
    assert cfg.space_map["tile_y"].product == 48
    assert cfg.axis(x).length == 48 and cfg.reduce_axis(C.op.reduce_axis[0]).name == "k"
    cfg.define_reorder("re", [y, x], policy="candidate", candidate=[[x, y], [y, x]])
    assert [e.perm for e in cfg.space_map["re"].entities] == [(1, 0), (0, 1)]
    with pytest.raises(ValueError):
        cfg.define_split("bad", te.var("n"), num_outputs=2)
