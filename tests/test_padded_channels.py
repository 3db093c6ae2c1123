"""Channel blocks that do not divide the channels (ShuffleNet's 58 and 116): the blocks hold
zeros past the channels, and every op that runs on them keeps those lanes finite.

The oracle is numpy: the template over its padded configs (data and weights zero-padded by
``pack_data`` / ``pack_kernel``), ``layout_transform`` with its ``channels``, and networks
built at opt_level 3 against the numpy interpreter of the original network.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv2d_nchwc_helpers import _run
from graph_helpers import check_blocked_network

from templtune import autotvm
from templtune.autotvm.task.space import FallbackConfigEntity
from templtune.graph import nn, reference
from templtune.graph.ir import Function
from templtune.graph.op import make_call
from templtune.graph.ops.elemwise import unary
from templtune.graph.ops.nchwc import layout_transform
from templtune.templates.x86._common import target_vector
from templtune.templates.x86.conv2d_nchwc_channels import padded_blocks


def _conv_run(args: tuple, cfg) -> tuple[int, int]:
    return _run(args, cfg, np.random.default_rng(sum(args[3:5])))


@pytest.mark.parametrize("args", [(1, 7, 9, 58, 58, 1, 1, 1, 0), (1, 6, 6, 58, 116, 3, 3, 2, 1),
                                  (1, 9, 9, 116, 24, 3, 3, 1, 1)])
def test_padded_configs_match_numpy(args) -> None:
    co, ci = args[3], args[4]
    lanes = target_vector()[0]
    space = autotvm.task.create("conv2d_NCHWc", args, "llvm").config_space
    seen = set()
    for i in space.sample_ints(min(12, len(space)), rng=np.random.default_rng(1)):
        seen.add(_conv_run(args, space.get(int(i))))
    fallback = _conv_run(args, FallbackConfigEntity())
    # the fallback fills registers: a padded block where no multiple of 8 divides
    assert fallback[1] in padded_blocks(co, lanes) or co % 8 == 0
    assert fallback[0] in padded_blocks(ci, lanes) or ci % 8 == 0
    assert any(co % oc for _, oc in seen | {fallback})


def test_layout_transform_pads_and_drops_the_lanes_past_the_channels() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 58, 3, 5)).astype(np.float32)
    d = nn.var("data", x.shape)
    a = layout_transform(d, "NCHW", "NCHW16c", channels=58)
    assert a.shape == (1, 4, 3, 5, 16)
    b = layout_transform(a, "NCHW16c", "NCHW32c", channels=58)
    c = layout_transform(b, "NCHW32c", "NCHW", channels=58)
    assert c.shape == x.shape
    f = Function((d,), c)
    for fn in (lambda: reference.evaluate(f, {}, data=x), lambda: _built(f, x)):
        np.testing.assert_array_equal(fn(), x)
    packed = reference.evaluate(Function((d,), a), {}, data=x)
    np.testing.assert_array_equal(packed.transpose(0, 1, 4, 2, 3).reshape(1, 64, 3, 5)[:, 58:], 0)
    with pytest.raises(Exception, match="do not hold"):
        layout_transform(a, "NCHW16c", "NCHW", channels=80)


def _built(f: Function, x: np.ndarray) -> np.ndarray:
    from graph_helpers import build_run

    return build_run(f, {}, {"data": x})[0]


def _shuffle_unit(act: str) -> tuple[Function, dict[str, np.ndarray]]:
    """A ShuffleNet v2 unit on 116 channels: split, 1x1 conv + relu, depthwise 3x3, 1x1 conv
    + ``act``, another 1x1 conv + relu, concat, channel shuffle; 58-channel convs throughout."""
    rng = np.random.default_rng(3)
    c, h = 58, 7
    params = {"w0": rng.standard_normal((c, c, 1, 1)).astype("float32") * 0.2,
              "b0": rng.standard_normal(c).astype("float32"),
              "wd": rng.standard_normal((c, 1, 3, 3)).astype("float32") * 0.3,
              "bd": rng.standard_normal(c).astype("float32"),
              "w1": rng.standard_normal((c, c, 1, 1)).astype("float32") * 0.2,
              "b1": rng.standard_normal(c).astype("float32"),
              "w2": rng.standard_normal((c, c, 1, 1)).astype("float32") * 0.2}
    if act == "log":  # |y| well away from 0 in the channels: log(|y|) well conditioned
        params["b1"] = rng.choice([-5.0, 5.0], c).astype("float32")
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    x = nn.var("data", (1, 2 * c, h, h))
    left, right = (make_call("strided_slice", [x], begin=(0, a, 0, 0), end=(1, a + c, h, h),
                             strides=(1, 1, 1, 1)) for a in (0, c))
    y = nn.relu(nn.bias_add(nn.conv2d(right, v["w0"]), v["b0"]))
    y = nn.bias_add(nn.conv2d(y, v["wd"], padding=(1, 1, 1, 1), groups=c), v["bd"])
    y = nn.bias_add(nn.conv2d(y, v["w1"]), v["b1"])
    if act == "log":  # a padded lane's log(|0|) is -inf, and the next conv's 0 * -inf NaN
        y = unary("log", unary("abs", y))
    else:
        y = unary(act, y) if act != "relu" else nn.relu(y)
    y = nn.relu(nn.conv2d(y, v["w2"]))
    cat = nn.concatenate([left, y], axis=1)
    pairs = make_call("reshape", [cat], newshape=(1, 2, c, h, h))
    out = make_call("reshape", [make_call("transpose", [pairs], axes=(0, 2, 1, 3, 4))],
                    newshape=(1, 2 * c, h, h))
    return Function((x, *v.values()), out), params


@pytest.mark.parametrize("act", ["relu", "sigmoid", "nn.hard_swish", "log"])
def test_shuffle_unit_runs_padded_blocks_and_matches_numpy(act) -> None:
    f, params = _shuffle_unit(act)
    x = np.abs(np.random.default_rng(4).standard_normal(f.params[0].shape)).astype(np.float32)
    check_blocked_network(f, params, x, fused=False)
    from templtune import transform
    from templtune.graph.alter_layout import alter_op_layout

    with transform.PassContext(opt_level=3):
        g, _ = alter_op_layout(f, params, "llvm")
    convs = [c for c in g.calls() if c.op == "nn.contrib_conv2d_NCHWc"]
    assert convs and all(c.attr("channels") == 58 for c in convs)
    assert all(c.args[0].shape[4] >= 8 for c in convs)  # no 2-lane blocks
    if act == "log":
        logs = [c for c in g.calls() if c.op == "log"]
        assert logs and all(len(c.args[0].shape) == 4 for c in logs)  # on plain NCHW


def test_xgb_tunes_a_padded_task_and_the_build_uses_its_record(tmp_path) -> None:
    from graph_helpers import build_run

    from templtune.autotvm import record
    from templtune.autotvm.measure import LocalBuilder, LocalRunner, MeasureErrorNo, measure_option

    f, params = _shuffle_unit("relu")
    tasks = [t for t in autotvm.task.extract_from_program(f, params, "llvm")
             if t.name == "conv2d_NCHWc" and t.args[3] == 58]
    assert tasks
    log = tmp_path / "padded.log"
    opt = measure_option(LocalBuilder(n_parallel=2), LocalRunner(number=2, repeat=1,
                                                                 cooldown_interval=0))
    tuner = autotvm.tuner.XGBTuner(tasks[0], feature_type="knob")
    tuner.tune(n_trial=6, early_stopping=None, measure_option=opt,
               callbacks=[autotvm.callback.log_to_file(str(log))])
    results = [res for _, res in record.load_from_file(str(log))]
    assert len(results) == 6 and all(r.error_no == MeasureErrorNo.NO_ERROR for r in results)
    x = np.abs(np.random.default_rng(5).standard_normal(f.params[0].shape)).astype(np.float32)
    with autotvm.apply_history_best(str(log)):
        out, lib = build_run(f, params, {"data": x})
    assert any(g.tuned for g in lib.groups)
    np.testing.assert_allclose(out, reference.evaluate(f, params, data=x), rtol=1e-4,
                               atol=1e-5)


def _downsample(c: int, tail: str) -> tuple[Function, dict[str, np.ndarray]]:
    """A ShuffleNet v2 downsampling branch on the (plain) input: depthwise 3x3 stride 2 +
    bias, then ``tail``: a 1x1 conv + relu (``"conv"``), or that conv and the depthwise
    output itself as a second output (``"shared"``: the depthwise value has two users)."""
    rng = np.random.default_rng(6)
    params = {"wd": rng.standard_normal((c, 1, 3, 3)).astype("float32") * 0.3,
              "bd": rng.standard_normal(c).astype("float32"),
              "w1": rng.standard_normal((c, c, 1, 1)).astype("float32") * 0.2}
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    x = nn.var("data", (1, c, 14, 14))
    y = nn.bias_add(nn.conv2d(x, v["wd"], strides=(2, 2), padding=(1, 1, 1, 1), groups=c),
                    v["bd"])
    out = nn.relu(nn.conv2d(y, v["w1"]))
    if tail == "shared":
        out = nn.concatenate([out, y], axis=1)
    return Function((x, *v.values()), out), params


@pytest.mark.parametrize("c", [116, 64])
def test_depthwise_on_a_plain_input_takes_its_consumers_blocking(c) -> None:
    from templtune.graph.alter_layout import alter_op_layout

    f, params = _downsample(c, "conv")
    g, _ = alter_op_layout(f, params, "llvm")
    ops = [k.op for k in g.calls()]
    assert "nn.contrib_depthwise_conv2d_NCHWc" in ops and "nn.conv2d" not in ops
    dw = next(k for k in g.calls() if k.op == "nn.contrib_depthwise_conv2d_NCHWc")
    conv = next(k for k in g.calls() if k.op == "nn.contrib_conv2d_NCHWc")
    assert dw.shape[4] == conv.args[0].shape[4]  # no transform between them
    impls = check_blocked_network(f, params, fused=False)
    assert "autotvm:depthwise_conv2d_NCHWc" in impls
    assert "autotvm:depthwise_conv2d_nchw" not in impls


@pytest.mark.parametrize("c", [116, 64])
def test_depthwise_whose_value_is_also_used_plain_stays_plain(c) -> None:
    from templtune.graph.alter_layout import alter_op_layout

    f, params = _downsample(c, "shared")
    g, _ = alter_op_layout(f, params, "llvm")
    assert "nn.contrib_depthwise_conv2d_NCHWc" not in [k.op for k in g.calls()]
    check_blocked_network(f, params, fused=False)


def _convnext_block(c: int) -> tuple[Function, dict[str, np.ndarray]]:
    """ConvNeXt's token mixer on a channels-last input: transpose to NCHW, depthwise 7x7 +
    bias, transpose back, layer norm over the channels; then (not next to the depthwise
    conv: through the layer norm) transposed again into a 1x1 conv."""
    rng = np.random.default_rng(8)
    params = {"wd": rng.standard_normal((c, 1, 7, 7)).astype("float32") * 0.2,
              "bd": rng.standard_normal(c).astype("float32"),
              "g": rng.standard_normal(c).astype("float32"),
              "b": rng.standard_normal(c).astype("float32"),
              "w1": rng.standard_normal((32, c, 1, 1)).astype("float32") * 0.2}
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    x = nn.var("data", (1, 14, 14, c))
    y = make_call("transpose", [x], axes=(0, 3, 1, 2))
    y = nn.bias_add(nn.conv2d(y, v["wd"], padding=(3, 3, 3, 3), groups=c), v["bd"])
    y = make_call("transpose", [y], axes=(0, 2, 3, 1))
    y = make_call("nn.layer_norm", [y, v["g"], v["b"]], axis=3, epsilon=1e-6)
    out = nn.conv2d(make_call("transpose", [y], axes=(0, 3, 1, 2)), v["w1"])
    return Function((x, *v.values()), out), params


@pytest.mark.parametrize("c", [64, 24, 20])
def test_depthwise_between_plain_ops_runs_blocked(c) -> None:
    """A depthwise conv with no blocked neighbour runs at a block of two vectors, else one,
    where one divides its channels (20: plain); the network matches numpy."""
    from templtune.graph.alter_layout import alter_op_layout
    from templtune.target import Target

    lanes = Target("llvm").capabilities.lanes("float32")
    want = next((b for b in (2 * lanes, lanes) if c % b == 0), 0)
    f, params = _convnext_block(c)
    g, _ = alter_op_layout(f, params, "llvm")
    dws = [k for k in g.calls() if k.op == "nn.contrib_depthwise_conv2d_NCHWc"]
    assert [k.shape[4] for k in dws] == ([want] if want else [])
    impls = check_blocked_network(f, params, fused=False)
    assert ("autotvm:depthwise_conv2d_NCHWc" in impls) == bool(want)


def _residual_stream(c: int) -> tuple[Function, dict[str, np.ndarray]]:
    """ConvNeXt's first stage: a plain residual stream (a layer norm's value, back in NCHW)
    and two blocks, each a depthwise 7x7 conv, a layer norm over channels-last values and a
    residual add; then a 1x1 conv (the downsampling one)."""
    rng = np.random.default_rng(9)
    params = {f"{k}{i}": rng.standard_normal(s).astype("float32") * 0.2
              for i in range(3) for k, s in (("w", (c, 1, 7, 7)), ("g", (c,)), ("b", (c,)))}
    params["down"] = rng.standard_normal((32, c, 1, 1)).astype("float32") * 0.2
    v = {k: nn.var(k, a.shape) for k, a in params.items()}
    x = nn.var("data", (1, 9, 9, c))

    def norm(y, i: int):  # channels-last layer norm of an NCHW value, back to NCHW
        y = make_call("transpose", [y], axes=(0, 2, 3, 1))
        y = make_call("nn.layer_norm", [y, v[f"g{i}"], v[f"b{i}"]], axis=3, epsilon=1e-6)
        return make_call("transpose", [y], axes=(0, 3, 1, 2))

    stream = norm(make_call("transpose", [x], axes=(0, 3, 1, 2)), 0)
    for i in (1, 2):
        stream = make_call("add", [norm(nn.conv2d(stream, v[f"w{i}"], padding=(3, 3, 3, 3),
                                                  groups=c), i), stream])
    return Function((x, *v.values()), nn.conv2d(stream, v["down"])), params


def test_residual_stream_runs_in_its_transformed_block() -> None:
    """The first residual add takes its plain operand's transform that feeds the depthwise
    conv (the other operand is transformed instead): the next depthwise conv reads the add's
    blocked value, no transform between; the network matches numpy."""
    from templtune.graph.alter_layout import alter_op_layout

    f, params = _residual_stream(64)
    g, _ = alter_op_layout(f, params, "llvm")
    dws = [k for k in g.calls() if k.op == "nn.contrib_depthwise_conv2d_NCHWc"]
    assert len(dws) == 2 and dws[1].args[0].op == "add"
    assert dws[0].args[0].op == "layout_transform"
    check_blocked_network(f, params, fused=False)
