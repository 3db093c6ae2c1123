"""Templates, task creation, instantiation and the FLOP counter (SPEC §2.1, §2.2, §2.5)."""

from __future__ import annotations

import pickle

import pytest

from templtune import autotvm, te
from templtune.autotvm.flop import FlopCalculationError, compute_flop
from templtune.autotvm.space import ConfigSpace
from templtune.autotvm.task.task import (
    TASK_TABLE,
    UnknownTemplateError,
    deserialize_args,
    serialize_args,
)
from templtune.errors import TempltuneError
from templtune.target import Target


@autotvm.template("test_task/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, s[C].op.reduce_axis[0], yi, xi)
    return s, [A, B, C]


@autotvm.template("test_task/conv2d_no_batching")
def conv2d_no_batching(N, H, W, CO, CI, KH, KW, stride, padding):
    from templtune.topi.nn.conv2d import conv2d_nchw

    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    n, f, y, x = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    return s, [data, kernel, conv]


@autotvm.template("test_task/tensor_args")
def tensor_args(A, scale):
    B = te.compute(A.shape, lambda i, j: A[i, j] * scale, name="B")
    s = te.create_schedule(B.op)
    cfg = autotvm.get_config()
    cfg.define_knob("k", [1, 2])
    cfg.add_flop(1234)
    return s, [A, B]


def test_create_matmul_task():
    task = autotvm.task.create("test_task/matmul", (128, 128, 128, "float32"), "llvm")
    assert task.name == "test_task/matmul"
    assert task.args == (128, 128, 128, "float32") and task.kwargs == {}
    assert task.workload == ("test_task/matmul", 128, 128, 128, "float32")
    assert len(task.config_space) == 64 and task.config_space.range_length == 64
    assert len(task.config_space.space_map["tile_y"]) == 8
    assert task.flop == 2 * 128 ** 3
    assert str(task.target) == "llvm" and task.target_host is None
    assert "test_task/matmul" in repr(task)


def test_instantiate_applies_the_config():
    task = autotvm.task.create("test_task/matmul", (64, 64, 64, "float32"), "llvm")
    cfg = task.config_space.get(3 + 7 * 2)  # tile_y [-1, 8], tile_x [-1, 4]
    s, args = task.instantiate(cfg)
    C = args[2]
    assert [iv.dom.extent.value for iv in s[C].leaf_iter_vars] == [8, 16, 64, 8, 4]
    assert cfg.flop == 0


def test_seed_conv2d_task():
    task = autotvm.task.create("test_task/conv2d_no_batching",
                               (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)), "cuda")
    assert len(task.config_space) == 10454400
    assert task.config_space.dims == [220, 4, 4, 55, 3, 3, 3, 2]
    assert task.workload == ("test_task/conv2d_no_batching", 1, 7, 7, 512, 512, 3, 3, (1, 1),
                             (1, 1))
    # 2*512*7*7*512*3*3 for the conv plus 7 ops per element of the 1x512x9x9 padding guard
    assert task.flop == 231_211_008 + 290_304


def test_tensor_args_and_add_flop():
    A = te.placeholder((4, 8), name="A", dtype="float16")
    task = autotvm.task.create("test_task/tensor_args", (A, 2.0), "llvm")
    assert task.args == (("TENSOR", (4, 8), "float16"), 2.0)
    assert task.flop == 1234
    s, args = task.instantiate(task.config_space.get(1))
    assert tuple(d.value for d in args[0].shape) == (4, 8) and args[0].dtype == "float16"
    back = deserialize_args(task.args)
    assert isinstance(back[0], te.Tensor) and back[1] == 2.0


def test_serialize_args_rules():
    assert serialize_args([1, [2, (3, "a")], None, 1.5]) == (1, (2, (3, "a")), None, 1.5)
    assert serialize_args([te.const(3), te.const(2.5)]) == (3, 2.5)
    with pytest.raises(TypeError, match="template argument"):
        serialize_args([object()])


def test_unknown_template_lists_known():
    with pytest.raises(UnknownTemplateError, match="test_task/matmul"):
        autotvm.task.create("no/such/template", (1,), "llvm")


def test_duplicate_registration():
    with pytest.raises(ValueError, match="already registered"):
        autotvm.template("test_task/matmul")(lambda: None)
    old = TASK_TABLE["test_task/matmul"]
    try:
        autotvm.template("test_task/matmul", override=True)(lambda: None)
        assert TASK_TABLE["test_task/matmul"] is not old
    finally:
        TASK_TABLE["test_task/matmul"] = old


def test_template_wrapper_refuses_kwargs_and_uses_fallback():
    with pytest.raises(TypeError, match="positional"):
        matmul(N=8, L=8, M=8, dtype="float32")
    with Target("llvm"):
        s, args = matmul(32, 32, 32, "float32")
    assert len(args) == 3


def test_get_config_in_collect_mode():
    seen = []

    @autotvm.template("test_task/probe", override=True)
    def probe(n):
        cfg = autotvm.get_config()
        seen.append(cfg)
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
        cfg.define_knob("x", [0, 1])
        return te.create_schedule(B.op), [A, B]

    task = autotvm.task.create("test_task/probe", (16,), "llvm")
    assert isinstance(seen[0], ConfigSpace) and seen[0] is task.config_space
    task.instantiate(task.config_space.get(1))
    assert seen[1].index == 1


def test_task_pickle_round_trip():
    task = autotvm.task.create("test_task/matmul", (32, 32, 32, "float32"), "llvm")
    task.config_space.multi_filter(lambda e: e["tile_x"].size[-1] > 1)
    back = pickle.loads(pickle.dumps(task))
    assert back.workload == task.workload and back.flop == task.flop
    assert len(back.config_space) == len(task.config_space) == 30
    assert str(back.target) == "llvm"
    s, args = back.instantiate(back.config_space.get(7))
    assert len(args) == 3


# --- FLOP counter (SPEC §2.5)

@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("float16", "float32"),
                                    ("int8", "int32")])
def test_flop_formulas(dtypes):
    din, dout = dtypes
    N, CI, H, W, CO, KH, KW = 1, 4, 10, 10, 8, 3, 3
    OH, OW = H - KH + 1, W - KW + 1
    D = te.placeholder((N, CI, H, W), dtype=din, name="D")
    K = te.placeholder((CO, CI, KH, KW), dtype=din, name="K")
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    conv = te.compute((N, CO, OH, OW), lambda n, f, y, x: te.sum(
        D[n, rc, y + ry, x + rx].astype(dout) * K[f, rc, ry, rx].astype(dout),
        axis=[rc, ry, rx]))
    assert compute_flop(te.create_schedule(conv.op)) == 2 * N * CO * OH * OW * CI * KH * KW

    n, l_, m = 16, 32, 24
    A = te.placeholder((n, l_), dtype=din)
    Bp = te.placeholder((m // 8, l_, 8), dtype=din)
    k = te.reduce_axis((0, l_))
    gemm = te.compute((n, m), lambda i, j: te.sum(
        A[i, k].astype(dout) * Bp[j // 8, k, j % 8].astype(dout), axis=k))
    assert compute_flop([gemm]) == 2 * n * l_ * m

    X = te.placeholder((n,), dtype=din)
    Y = te.placeholder((m,), dtype=din)
    outer = te.compute((n, m), lambda i, j: X[i] * Y[j])
    assert compute_flop(outer.op) == n * m

    ky = te.reduce_axis((0, KH))
    kx = te.reduce_axis((0, KW))
    mpool = te.compute((N, CO, OH, OW), lambda b, c, y, x: te.max(
        D[b, c % CI, y + ky, x + kx], axis=[ky, kx]))
    assert compute_flop(mpool) == N * CO * OH * OW * KH * KW
    ky2 = te.reduce_axis((0, KH))
    kx2 = te.reduce_axis((0, KW))
    apool = te.compute((N, CO, OH, OW), lambda b, c, y, x: te.sum(
        D[b, c % CI, y + ky2, x + kx2].astype(dout) / (KH * KW), axis=[ky2, kx2]))
    assert compute_flop(apool) == 2 * N * CO * OH * OW * KH * KW


def test_flop_shared_producer_counted_once_and_copy_raises():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((10,), lambda i: B[i] * B[i] + B[i], name="C")
    D = te.compute((10,), lambda i: B[i] - C[i], name="D")
    assert compute_flop(D) == 10 + 20 + 10  # B once although D reaches it twice
    copy = te.compute((10,), lambda i: A[i], name="copy")
    with pytest.raises(FlopCalculationError, match="add_flop"):
        compute_flop(copy)
    with pytest.raises(RuntimeError):
        compute_flop(copy)


# --- TOPI-style registration and task extraction

@autotvm.register_topi_compute("test_task/dense.topi")
def dense_compute(cfg, data, weight):
    n, k_ = data.shape
    m = weight.shape[0]
    k = te.reduce_axis((0, k_), name="k")
    cfg.define_split("tile_k", k, num_outputs=2)
    return te.compute((n, m), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k),
                      name="dense")


@autotvm.register_topi_schedule("test_task/dense.topi")
def dense_schedule(cfg, outs):
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    cfg.define_knob("unroll", [0, 1])
    cfg["tile_k"].apply(s, out, s[out].op.reduce_axis[0])
    return s


def test_topi_compute_schedule_task():
    from templtune.autotvm.task.topi_integration import get_workload

    data = te.placeholder((4, 32), name="data")
    weight = te.placeholder((8, 32), name="weight")
    task = autotvm.task.create("test_task/dense.topi", (data, weight), "llvm")
    assert task.config_space.dims == [6, 2]
    assert task.flop == 2 * 4 * 8 * 32
    s, args = task.instantiate(task.config_space.get(3))
    assert [tuple(d.value for d in t.shape) for t in args] == [(4, 8), (4, 32), (8, 32)]
    assert get_workload(args[0]) == task.workload
    with pytest.raises(ValueError, match="already registered"):
        autotvm.register_topi_compute("test_task/dense.topi")(lambda cfg: None)
    with Target("llvm"), pytest.raises(TempltuneError, match="register_topi_compute"):
        dense_schedule([te.compute((2,), lambda i: data[0, i] + 1.0)])


def test_extract_tasks():
    from templtune.autotvm.task.topi_integration import extract_tasks

    def program():
        for n in (4, 16, 4):
            d = te.placeholder((n, 32), name="d")
            w = te.placeholder((8, 32), name="w")
            out = dense_compute(d, w)
            dense_schedule([out])
        matmul(16, 16, 16, "float32")

    tasks = extract_tasks(program, "llvm")
    assert [(t.name, t.args[0]) for t in tasks] == [
        ("test_task/dense.topi", ("TENSOR", (4, 32), "float32")),
        ("test_task/dense.topi", ("TENSOR", (16, 32), "float32")),
        ("test_task/matmul", 16)]
    assert len(extract_tasks(program, "llvm", allow_duplicate=True)) == 4
    only = extract_tasks(program, "llvm", ops=["test_task/matmul"])
    assert [t.name for t in only] == ["test_task/matmul"]
