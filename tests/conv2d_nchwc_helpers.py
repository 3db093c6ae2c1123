"""Shared helpers of the ``tests/test_conv2d_nchwc_*.py`` tests of the x86 ``conv2d_NCHWc``
template: build and run a config against numpy, with or without a fused bias / residual / relu
epilogue, and config entities of a chosen register block."""

from __future__ import annotations

import numpy as np

import templtune
from templtune import autotvm
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data
from templtune.target import Target
from templtune.topi import testing as ref


def _run(args: tuple, cfg, rng: np.random.Generator) -> tuple[int, int]:
    """Run ``cfg``'s kernel of ``args`` on random data against numpy; every output element
    must be written, and the lanes of a block past the channels (a padded block) be zeros.
    Returns the config's ``(ic_bn, oc_bn)``."""
    n, h, w, co, ci, kh, kw, s, p = args
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    mod = templtune.build(sch, tensors, target="llvm")
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    expect = ref.conv2d_nchw_python(x, k, s, p)
    # a conv over fused pixels declares its output as [n, co/oc_bn, oh*ow, oc_bn]
    out = np.full(tuple(int(d) for d in tensors[2].shape), np.nan, np.float32)
    mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn), out)
    blocked = out.reshape(n, -1, *expect.shape[2:], oc_bn)
    np.testing.assert_allclose(unpack_data(blocked, co), expect, rtol=1e-3, atol=1e-3,
                               err_msg=str(cfg))
    np.testing.assert_array_equal(unpack_data(blocked)[:, co:], 0)
    return ic_bn, oc_bn


def _bias_residual_relu(args: tuple, cfg) -> tuple:
    """``(module, ic_bn, oc_bn)``: ``cfg``'s kernel of ``args`` with a fused bias, residual add
    and relu."""
    from templtune import topi
    from templtune.autotvm.epilogue import Epilogue, EpilogueInput

    n, h, w, co, ci, kh, kw, s, p = args
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        task.func(*args)
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    out_shape = (n, co // oc_bn, oh, ow, oc_bn)
    ep = Epilogue((EpilogueInput((1, co // oc_bn, 1, 1, oc_bn)), EpilogueInput(out_shape)),
                  lambda out, ins: topi.nn.relu(topi.add(topi.add(out, ins[0]), ins[1])),
                  "bias_add_relu")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args, epilogue=ep)
    assert len(tensors) == 5
    return templtune.build(sch, tensors, target="llvm"), ic_bn, oc_bn


def _check_bias_residual_relu(mod, args: tuple, ic_bn: int, oc_bn: int, seed: int) -> None:
    """Run ``mod`` (from :func:`_bias_residual_relu`) on random inputs against numpy."""
    from templtune.graph.ops.nchwc import pack_bias

    n, h, w, co, ci, kh, kw, s, p = args
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    k = rng.standard_normal((co, ci, kh, kw)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    conv = ref.conv2d_nchw_python(x, k, s, p)
    r = rng.standard_normal(conv.shape).astype(np.float32)
    expect = np.maximum(conv + b[None, :, None, None] + r, 0)
    out = np.zeros((n, co // oc_bn, *conv.shape[2:], oc_bn), np.float32)
    # a conv over fused pixels declares its output as [n, co/oc_bn, oh*ow, oc_bn]
    mod(pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn), pack_bias(b, oc_bn),
        pack_data(r, oc_bn), out.reshape(mod.params[-1].shape))
    np.testing.assert_allclose(unpack_data(out), expect, rtol=1e-3, atol=1e-3)


def _entities(ic: int, oc: int, ow: int, unroll: bool) -> dict:
    from templtune.autotvm.space import ConfigEntity

    return ConfigEntity.from_json_dict({"index": 0, "entity": [
        ["tile_ic", "sp", [-1, ic]], ["tile_oc", "sp", [-1, oc]], ["tile_ow", "sp", [-1, ow]],
        ["unroll_kw", "ot", unroll]]})
