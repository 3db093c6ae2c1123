"""ConfigSpace sizes, enumeration order, index mapping and multi_filter (SPEC §1.2-§1.6, §1.9,
§7 facts 1-5)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templtune.autotvm.space import ConfigSpace
from templtune.autotvm.task.knobs import AnnotateSpace, ReorderSpace, SplitSpace, VirtualAxis

# TVM v0.11+ prints range_length (the seed document, older, does not)
SEED_REPR = """ConfigSpace (len=10454400, range_length=10454400, space_map=
   0 tile_f: Split(policy=factors, product=512, num_outputs=4) len=220
   1 tile_y: Split(policy=factors, product=7, num_outputs=4) len=4
   2 tile_x: Split(policy=factors, product=7, num_outputs=4) len=4
   3 tile_rc: Split(policy=factors, product=512, num_outputs=3) len=55
   4 tile_ry: Split(policy=factors, product=3, num_outputs=3) len=3
   5 tile_rx: Split(policy=factors, product=3, num_outputs=3) len=3
   6 auto_unroll_max_step: OtherOption([0, 512, 1500]) len=3
   7 unroll_explicit: OtherOption([0, 1]) len=2
)"""


@functools.cache
def seed_space() -> ConfigSpace:
    """The define_* calls of the tutorial conv2d CUDA template (N=1, H=W=7, CO=CI=512, 3x3,
    stride 1, pad 1): output 1x512x7x7, reduce 512x3x3."""
    cfg = ConfigSpace()
    f, y, x, rc, ry, rx = 512, 7, 7, 512, 3, 3
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    return cfg


def entities(cfg: ConfigSpace, index: int) -> list:
    c = cfg.get(index)
    return [getattr(c[k], "size", None) or c[k].val for k in c]


def test_seed_space_size_and_repr():
    cfg = seed_space()
    assert len(cfg) == 10454400 == cfg.range_length
    assert cfg.dims == [220, 4, 4, 55, 3, 3, 3, 2]
    assert repr(cfg) == SEED_REPR


def test_seed_index_vectors():
    cfg = seed_space()
    first = [(-1, 1, 1, 1)] * 3 + [(-1, 1, 1)] * 3
    assert entities(cfg, 0)[:6] == first
    assert [cfg.get(0)[k].val for k in ("auto_unroll_max_step", "unroll_explicit")] == [0, 0]
    assert cfg.get(1)["tile_f"].size == (-1, 2, 1, 1)
    assert entities(cfg, 1)[1:6] == first[1:]
    assert cfg.get(220)["tile_y"].size == (-1, 7, 1, 1)
    assert cfg.get(220)["tile_f"].size == (-1, 1, 1, 1)
    c = cfg.get(1_000_000)
    assert [c[k].size for k in ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx")] \
        == [(-1, 1, 1, 4), (-1, 7, 1, 1), (-1, 1, 1, 1), (-1, 512, 1), (-1, 1, 3), (-1, 3, 1)]
    assert (c["auto_unroll_max_step"].val, c["unroll_explicit"].val) == (0, 0)
    c = cfg.get(10_454_399)
    assert [c[k].size for k in ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx")] \
        == [(-1, 1, 1, 512), (-1, 1, 1, 7), (-1, 1, 1, 7), (-1, 1, 512), (-1, 1, 3), (-1, 1, 3)]
    assert (c["auto_unroll_max_step"].val, c["unroll_explicit"].val) == (1500, 1)
    with pytest.raises(IndexError):
        cfg.get(10_454_400)
    with pytest.raises(IndexError):
        cfg.get(-1)


@pytest.mark.parametrize("n,k,policy,count", [
    (256, 3, "factors", 45), (256, 3, "power2", 45), (256, 3, "verbose", 45),
    (224, 3, "factors", 63), (224, 3, "power2", 36), (224, 3, "verbose", 84),
    (2 ** 25, 4, "factors", 3276), (128, 2, "factors", 8), (512, 4, "factors", 220),
    (7, 4, "factors", 4), (512, 3, "factors", 55),
])
def test_split_counts(n, k, policy, count):
    cfg = ConfigSpace()
    cfg.define_split("s", n, policy=policy, num_outputs=k)
    assert len(cfg) == count


def test_split_enumeration_order():
    sp = SplitSpace([VirtualAxis(512)], "factors", num_outputs=4)
    sizes = [e.size for e in sp.entities]
    assert sizes[:3] == [(-1, 1, 1, 1), (-1, 2, 1, 1), (-1, 4, 1, 1)]
    assert sizes[9] == (-1, 512, 1, 1) and sizes[10] == (-1, 1, 2, 1)
    assert sizes[100] == (-1, 1, 1, 4)
    assert sizes[-1] == (-1, 1, 1, 512)
    seven = SplitSpace([VirtualAxis(7)], "factors", num_outputs=4)
    assert [e.size for e in seven.entities] == [(-1, 1, 1, 1), (-1, 7, 1, 1), (-1, 1, 7, 1),
                                                (-1, 1, 1, 7)]


def test_split_policies_options():
    # verbose: sorted union of divisors and powers of two (a documented deviation from TVM).
    sp = SplitSpace([VirtualAxis(224)], "verbose", num_outputs=2)
    assert [e.size[1] for e in sp.entities] == sorted(
        {1, 2, 4, 7, 8, 14, 16, 28, 32, 56, 64, 112, 128, 224})
    # power2 allows tails: 12 -> inner 1, 2, 4, 8
    assert [e.size for e in SplitSpace([VirtualAxis(12)], "power2", num_outputs=2).entities] == \
        [(-1, 1), (-1, 2), (-1, 4), (-1, 8)]
    assert len(SplitSpace([VirtualAxis(12)], "power2", num_outputs=2, no_tail=True)) == 3
    # max_factor bounds inner factors only
    sp = SplitSpace([VirtualAxis(64)], "factors", num_outputs=3, max_factor=4)
    assert all(max(e.size[1:]) <= 4 for e in sp.entities) and len(sp) == 9
    sp = SplitSpace([VirtualAxis(64)], "factors", num_outputs=2, filter=lambda e: e.size[1] > 8)
    assert [e.size[1] for e in sp.entities] == [16, 32, 64]
    sp = SplitSpace([VirtualAxis(64)], "candidate", num_outputs=2, candidate=[[8, 8], [-1, 4]])
    assert [e.size for e in sp.entities] == [(8, 8), (-1, 4)]
    with pytest.raises(ValueError):
        SplitSpace([VirtualAxis(64)], "candidate", num_outputs=3, candidate=[[8, 8]])
    with pytest.raises(ValueError):
        SplitSpace([VirtualAxis(64)], "bogus", num_outputs=2)
    assert len(SplitSpace([VirtualAxis(64)], "factors", num_outputs=1)) == 1


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2000), k=st.integers(1, 4))
def test_split_factors_count_is_ordered_factorisations(n, k):
    sp = SplitSpace([VirtualAxis(n)], "factors", num_outputs=k)
    # count = prod over prime powers p^e of C(e + k - 1, k - 1)
    expected, m, p = 1, n, 2
    while p * p <= m:
        e = 0
        while m % p == 0:
            m //= p
            e += 1
        expected *= math.comb(e + k - 1, k - 1)
        p += 1
    if m > 1:
        expected *= k
    assert len(sp) == expected
    assert all(n % math.prod(e.size[1:]) == 0 and e.size[0] == -1 for e in sp.entities)
    assert len({e.size for e in sp.entities}) == len(sp)


def test_reorder_policies():
    ax = [VirtualAxis(4, f"a{i}") for i in range(4)]
    assert [e.perm for e in ReorderSpace(ax, "identity").entities] == [(0, 1, 2, 3)]
    assert len(ReorderSpace(ax, "all")) == 24
    assert ReorderSpace(ax, "all").entities[1].perm == (0, 1, 3, 2)
    sp = ReorderSpace(ax, "interval_all", interval=(1, 3))
    assert [e.perm for e in sp.entities] == [(0, 1, 2, 3), (0, 2, 1, 3)]
    sp = ReorderSpace(ax, "candidate", candidate=[[ax[3], ax[2], ax[1], ax[0]]])
    assert sp.entities[0].perm == (3, 2, 1, 0)
    a0, a1, b0, b1 = ax
    sp = ReorderSpace(ax, "interleave", spatial=[[a0, a1], [b0, b1]], reduce=[])
    assert [e.perm for e in sp.entities] == [(0, 2, 1, 3)]
    ax6 = [VirtualAxis(4, f"x{i}") for i in range(6)]
    s0, s1, s2, t0, t1, r0 = ax6
    sp = ReorderSpace(ax6, "interleave", spatial=[[s0, s1, s2], [t0, t1]], reduce=[[r0]])
    # outer = merge([s0, s1], [t0]) = s0 s1 t0; inner = merge([s2], [t1], [r0])
    assert [e.perm for e in sp.entities] == [(0, 1, 3, 2, 4, 5)]
    sp = ReorderSpace(ax6, "interleave_cuda", spatial=[[s0, s1, s2], [t0, t1]], reduce=[[r0]])
    assert sp.entities[0].perm == (0, 1, 3, 5, 2, 4)


@pytest.mark.parametrize("policy,counts", [
    ("try_unroll", [2, 4, 8]), ("try_vec", [2, 3, 4]), ("try_unroll_vec", [3, 8, 20]),
    ("vec", [1, 0, 0]), ("unroll", [1, 1, 1]),
])
def test_annotate_counts(policy, counts):
    for n, c in zip((1, 2, 3), counts):
        assert len(AnnotateSpace([VirtualAxis(8)] * n, policy)) == c


def test_annotate_bind_and_locate():
    ax = [VirtualAxis(8, f"a{i}") for i in range(7)]
    assert AnnotateSpace(ax[:2], "bind_gpu").entities[0].anns == ("blockIdx.x", "threadIdx.x")
    assert AnnotateSpace(ax[:5], "bind_gpu").entities[0].anns == (
        "fuse", "blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x")
    assert AnnotateSpace(ax[:7], "bind_gpu").entities[0].anns[:2] == ("fuse", "blockIdx.z")
    assert AnnotateSpace(ax[:3], "bind_gpu_virtual").entities[0].anns == (
        "blockIdx.x", "vthread", "threadIdx.x")
    with pytest.raises(ValueError):
        AnnotateSpace(ax[:1], "bind_gpu")
    sp = AnnotateSpace(ax[:5], "locate_cache", num_anchor=2)
    assert len(sp) == 10 and sp.entities[0].anns == (0, 1)
    with pytest.raises(ValueError):
        AnnotateSpace(ax[:2], "try_bogus")


def test_knob_and_redefinition_keeps_position():
    cfg = ConfigSpace()
    cfg.define_knob("a", [1, 2])
    cfg.define_split("b", 16, num_outputs=2)
    cfg.define_knob("a", [1, 2, 3])
    assert list(cfg.space_map) == ["a", "b"] and cfg.dims == [3, 5]
    assert repr(cfg.space_map["a"]) == "OtherOption([1, 2, 3]) len=3"
    assert cfg["a"].val == 1 and cfg["b"].size == (-1, 1)
    with pytest.raises(ValueError, match="no valid entity"):
        cfg.define_annotate("v", [VirtualAxis(4), VirtualAxis(4)], policy="vec")
    with pytest.raises(KeyError, match="knobs: a, b"):
        cfg["nope"]


# --- multi_filter on the sample GEMM (SPEC §7, fact 4 and 5)

def gemm_space(per_knob_filter: bool = False, multi: bool = True, order: str = "filter-first"):
    cfg = ConfigSpace()
    mf = lambda e: 32 <= e["tile_x"].size[-1] * e["tile_y"].size[-1] < 1024  # noqa: E731
    if multi and order == "multi-first":
        cfg.multi_filter(mf)
    kw = {"filter": lambda e: e.size[-1] < 64} if per_knob_filter else {}
    cfg.define_split("tile_y", 128, num_outputs=2, **kw)
    cfg.define_split("tile_x", 128, num_outputs=2)
    if multi and order == "filter-first":
        cfg.multi_filter(mf)
    return cfg


def test_multi_filter_facts():
    cfg = gemm_space()
    assert (len(cfg), cfg.range_length, cfg.dims) == (34, 64, [8, 8])
    assert not cfg.is_index_valid(0) and cfg.is_index_valid(15)
    with pytest.raises(IndexError):
        cfg.get(0)
    assert cfg.get(15).index == 15
    assert [cfg.subrange_length(*r) for r in [(0, 64), (0, 32), (16, 32), (16, 16)]] == \
        [34, 17, 10, 0]
    for bad in [(0, 128), (-64, 64), (64, 0)]:
        with pytest.raises(IndexError):
            cfg.subrange_length(*bad)
    assert [cfg.point2knob(p) for p in (0, 4, 8, 12)] == [[0, 0], [4, 0], [0, 1], [4, 1]]
    assert [cfg.knob2point(k) for k in ([0, 0], [4, 0], [0, 1], [4, 1])] == [0, 4, 8, 12]
    nx = cfg.get_next_index
    assert (nx(0), nx(0, 2), nx(0, -1), nx(0, -2), nx(63, 1)) == (5, 6, None, None, None)
    assert (nx(63, -1), nx(63, -2), nx(60, 1, end=63), nx(63, -1, start=60)) == \
        (58, 57, None, None)
    plain = gemm_space(multi=False)
    assert (plain.get_next_index(0), plain.get_next_index(63, -1),
            plain.get_next_index(60, 1, end=63)) == (1, 62, 61)
    assert cfg.get_rand_index(start=15, end=16) == 15
    valid = [i for i in range(64) if cfg.is_index_valid(i)]
    assert valid[0] == 5 and valid[-1] == 58
    assert cfg.get_rand_index(to_exclude=valid[:-1], rng=1) == 58
    with pytest.raises(ValueError):
        cfg.get_rand_index(to_exclude=valid, rng=1)
    s = cfg.sample_ints(5, rng=0)
    assert len(set(s.tolist())) == 5 and all(cfg.is_index_valid(int(i)) for i in s)
    assert sorted(cfg.sample_ints(34, rng=0).tolist()) == valid
    w = cfg.random_walk(15, rng=0)
    assert w != 15 and cfg.is_index_valid(w)
    assert repr(cfg).startswith("ConfigSpace (len=34, range_length=64, space_map=")


def test_filter_and_multi_filter_in_either_order():
    only = gemm_space(per_knob_filter=True, multi=False)
    assert (len(only), only.range_length) == (48, 48)
    both = gemm_space(per_knob_filter=True)
    assert (len(both), both.range_length) == (27, 48)
    rev = gemm_space(per_knob_filter=True, order="multi-first")
    assert (len(rev), rev.range_length) == (27, 48)


def test_point_of_matches_knob_values_not_the_index():
    """A record's config maps onto another space by its knob values: an unfiltered space
    (another CPU's filters) gives the same values another index; a point this space filters
    out, or a value it does not offer, has none."""
    cfg, plain = gemm_space(), gemm_space(multi=False, per_knob_filter=True)
    src = plain.get(15)
    got = cfg.point_of(src)
    assert got is not None and got.index == cfg.knob2point([
        list(cfg.space_map[k].entities).index(src[k]) for k in cfg.space_map])
    assert all(got[k] == src[k] for k in cfg.space_map)
    assert cfg.point_of(plain.get(0)) is None  # 1 x 1 tiles: filtered out here
    assert plain.point_of(cfg.get(cfg.knob2point([6, 0]))) is None  # tile_y 64: no choice there
    assert cfg.point_of(object()) is None


def test_sampling_is_seeded():
    cfg = gemm_space()
    assert cfg.sample_ints(10, rng=3).tolist() == cfg.sample_ints(10, rng=3).tolist()
    gen = np.random.default_rng(5)
    assert all(cfg.is_index_valid(cfg.get_rand_index(rng=gen)) for _ in range(20))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10454399))
def test_point2knob_roundtrip(p):
    cfg = seed_space()
    k = cfg.point2knob(p)
    assert all(0 <= d < n for d, n in zip(k, cfg.dims))
    assert cfg.knob2point(k) == p
    c = cfg.get(p)
    assert [cfg.space_map[n].entities[d] for n, d in zip(cfg.space_map, k)] == [c[n] for n in c]
