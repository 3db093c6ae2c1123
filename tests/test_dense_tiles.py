"""x86 ``dense``: tiles of several column blocks (``tile_x = [no, nb, bn]``) and the packaged
records of the three-way ``tile_x``.

A tile of ``mb * rb`` rows x ``nb * bn`` columns computes its register blocks row block by row
block, the ``nb`` column blocks of one row block in turn (its data rows read again from cache);
these configs must match numpy, with a plain or packed weight and with a fused epilogue, and the
register block of the fast AVX-512 configs must stay FMAs fed by loads, with no spill.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import templtune
from templtune import autotvm
from templtune.autotvm.epilogue import Epilogue
from templtune.autotvm.record import check_config
from templtune.autotvm.space import ConfigEntity
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.codegen.llvm.asm_loops import hottest_loop
from templtune.target import Target, capabilities
from templtune.templates._strategy import pack_dense
from templtune.templates.x86.dense import _dense

# NOTE: the templates package's own folder (a source checkout, an editable or a wheel install)
LOGS = next(Path(p) for p in importlib.util.find_spec("templtune.templates")
            .submodule_search_locations) / "logs" / "cpu"
AVX512 = "llvm -mcpu=znver4"


def _config(space, tile_y, tile_x, tile_k) -> ConfigEntity:
    """The config of ``space`` with these split sizes (outer sizes may be -1)."""
    want = {"tile_y": tile_y, "tile_x": tile_x, "tile_k": tile_k}
    for i in range(space.range_length):
        if not space.is_index_valid(i):
            continue
        cfg = space.get(i)
        if all(list(cfg[k].size)[1:] == v[1:] for k, v in want.items()):
            return cfg
    raise AssertionError(f"{want} is not in the space")


def _run(args, cfg):
    m, n, k = args[:3]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    task = autotvm.task.create("dense", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        s, bufs = task.func(*task.args)
    mod = templtune.build(s, bufs, target="llvm")
    weight = pack_dense(args[3])(w) if len(args) > 3 else w
    out = np.zeros((m, n), np.float32)
    mod(a, weight, out)
    return out, a @ w.T


@pytest.mark.parametrize("args,tile_y,tile_x,tile_k", [
    ((16, 96, 24), [-1, 2, 8], [-1, 3, 8], [-1, 4]),     # 2 row blocks x 3 column blocks
    ((16, 96, 24), [-1, 1, 8], [-1, 6, 8], [-1, 8]),
    ((24, 64, 40, 8), [-1, 3, 8], [-1, 2, 8], [-1, 5]),   # prepacked, 3 x 2 blocks
    # 32 lanes: 8 rows x 2 zmm with AVX-512, 2 rows x 4 ymm with AVX2 (32 accumulators
    # would not fit in 16 registers)
    ((8, 128, 16, 32), "rows", [-1, 4, 32], [-1, 4]),
    ((1, 80, 24, 8), [-1, 1, 1], [-1, 5, 8], [-1, 2]),    # batch 1, prepacked
])
def test_multi_block_tiles_match_numpy(args, tile_y, tile_x, tile_k):
    space = autotvm.task.create("dense", args, "llvm").config_space
    if tile_y == "rows":
        rows = 8 if capabilities("llvm").vector_registers >= 32 else 2
        tile_y = [-1, args[0] // rows, rows]
    cfg = _config(space, tile_y, tile_x, tile_k)
    assert cfg["tile_x"].size[-2] > 1
    out, expected = _run(args, cfg)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@pytest.mark.parametrize("target,rows", [("llvm -mcpu=skylake-avx512", [8, 1, 8]),
                                         ("llvm -mcpu=haswell", [1, 11, 6])])
def test_fallback_tile_spans_several_column_blocks(target, rows):
    """The fallback's tile: one row block across several column blocks (about 128 columns);
    with AVX2, whose exact 4 x 2 ymm block has fewer accumulators than 6 x 2, a tile of
    6-row blocks, the last one partial."""
    task = autotvm.task.create("dense", (64, 256, 32), target)
    cfg = FallbackConfigEntity()
    with Target(target), autotvm.ApplyConfig(cfg):
        task.func(*task.args)
    _, nb, bn = cfg["tile_x"].size
    assert nb > 1 and nb * bn == 128, cfg
    assert list(cfg["tile_y"].size) == rows, cfg


@pytest.mark.parametrize("args", [(1024, 1024, 1024), (1024, 1024, 1024, 32)])
def test_avx512_fast_block_is_loads_and_fmas_without_spills(args):
    """8 rows x 32 lanes over 4 column blocks, 4 steps of k unrolled: 16 zmm accumulators, per
    step 8 broadcasts of the data rows and 2 vector loads of the weight (or FMA memory
    operands), nothing else in the loop and nothing on the stack."""
    task = autotvm.task.create("dense", args, AVX512)
    cfg = _config(task.config_space, [-1, 1, 8], [-1, 4, 32], [-1, 4])
    with Target(AVX512), autotvm.ApplyConfig(cfg):
        s, bufs = task.func(*task.args)
    loop = hottest_loop(templtune.build(s, bufs, target=AVX512).get_source("asm"))
    assert loop.fma_width == {"zmm"} and loop.accumulators == 16, loop
    assert loop.fmas % 16 == 0 and loop.fmas >= 64, loop
    assert loop.stack_accesses == 0 and loop.vector_stores == 0, loop
    assert loop.other_vector_ops == (), loop
    loads = loop.broadcast_loads + loop.vector_loads + loop.fma_memory_operands
    assert loads <= loop.fmas * 10 // 16, loop   # 8 broadcasts + 2 weight loads per 16 FMAs
    assert loop.broadcast_loads + loop.fma_memory_operands >= loop.fmas // 2, loop


@pytest.mark.parametrize("log", ["x86.log", "x86_avx512.log"])
def test_packaged_dense_records_fit_the_space(log):
    """Every packaged x86 ``dense`` record (three-way ``tile_x``) loads without rejection."""
    checked = 0
    for line in (LOGS / log).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        target, name, args = rec["input"][:3]
        if name != "dense":
            continue
        space = autotvm.task.create(name, tuple(args), target).config_space
        cfg = ConfigEntity.from_json_dict(rec["config"])
        assert check_config(space, cfg) is None, (args, check_config(space, cfg))
        checked += 1
    assert checked >= 4


def test_two_way_tile_x_record_is_rejected():
    """A record of the older two-way ``tile_x`` does not fit the three-way space."""
    space = autotvm.task.create("dense", (1, 1000, 512, 8), "llvm").config_space
    old = ConfigEntity.from_json_dict({"index": 1, "code_hash": None, "entity": [
        ["tile_y", "sp", [-1, 1, 1]], ["tile_x", "sp", [125, 8]], ["tile_k", "sp", [-1, 2]]]})
    assert "tile_x" in (check_config(space, old) or "")


def test_epilogue_runs_on_multi_block_tiles():
    """A fused bias + relu tail computed on a tile of several column blocks matches numpy."""
    from templtune import te
    from templtune.autotvm.epilogue import EpilogueInput

    m, n, k = 16, 96, 24
    space = autotvm.task.create("dense", (m, n, k), "llvm").config_space
    cfg = _config(space, [-1, 2, 8], [-1, 3, 8], [-1, 4])

    def tail(out, extras):
        (bias,) = extras
        return te.compute(out.shape, lambda i, j: te.max(out[i, j] + bias[j], 0.0),
                          name="bias_relu")

    epi = Epilogue((EpilogueInput((n,)),), tail, key="bias_relu", ops=("add", "relu"))
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        s, bufs = _dense(m, n, k, epilogue=epi)
    mod = templtune.build(s, bufs, target="llvm")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    mod(a, w, b, out)
    np.testing.assert_allclose(out, np.maximum(a @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_weight_pack_stores_whole_vectors():
    """The in-kernel weight pack writes ``bn``-wide vectors of ``[N/bn, K, bn]`` (one gathered
    float per weight row) rather than a scalar copy per element."""
    task = autotvm.task.create("dense", (64, 256, 64), "llvm")
    with Target("llvm"), autotvm.ApplyConfig(FallbackConfigEntity()):
        s, bufs = task.func(*task.args)
    text = str(templtune.lower(s, bufs, simple_mode=True))
    stores = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("weight_pack[")]
    assert stores and all(ln.startswith("weight_pack[ramp(") for ln in stores), stores
