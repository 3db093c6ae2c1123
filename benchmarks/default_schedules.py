"""Default schedules of non-tuned groups: old (parallel only) vs new (vectorized + parallel).

Times ResNet-18's max-pool 3x3/2 (1x64x112x112 NCHW), softmax (1x1000 and ViT attention rows),
ViT-MLP-sized element-wise math (sigmoid, tanh, erf GELU), layer norms, global average pooling and NCHW ->
NCHW[x]c layout transforms at 1 and 2 threads, interleaving old, new and numpy rounds in one process (the
median of the rounds is robust to a loaded machine), and prints the per-call medians and the ratios. Kernels are timed by their
native timer (``time_evaluator``: no Python call overhead, about 15 us per call here), numpy
by ``perf_counter`` around its calls (its own per-call overhead included).

Usage: ``python3 -m benchmarks.default_schedules [--rounds 31] [--only softmax]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import templtune
from templtune import te, topi
from templtune.graph.default_schedules import default_schedule
from templtune.te.expr import Reduce
from templtune.te.tensor import ComputeOp


def baseline_schedule(tensors: list[te.Tensor]) -> Any:
    """The previous default: injective producers inlined, leading loops fused and parallel,
    the innermost spatial loop inside the reduction; no explicit vectorization."""
    out = tensors[-1]
    s = te.create_schedule(out.op)
    for stage in s.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and op is not out.op and not isinstance(op.body[0], Reduce):
            stage.compute_inline()
    for stage in s.stages:
        op = stage.op
        if not isinstance(op, ComputeOp) or stage.attach_type == "inline":
            continue
        axes = list(stage.leaf_iter_vars[:len(op.axis)])
        if isinstance(op.body[0], Reduce) and len(axes) > 1:
            stage.reorder(*axes[:-1], *op.reduce_axis, axes[-1])
        n, extent = 0, 1
        while n < len(axes) - 1 and extent < 64:
            extent *= int(op.axis[n].dom.extent.value)
            n += 1
        if n:
            stage.parallel(stage.fuse(*axes[:n]) if n > 1 else axes[0])
    return s


def _time(fn: Callable[[], None], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def _case(name: str, x: te.Tensor, y: te.Tensor, ref: Callable[[np.ndarray], np.ndarray],
          rounds: int, number: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(tuple(int(d) for d in x.shape)).astype("float32")
    out = np.zeros(tuple(int(d) for d in y.shape), "float32")
    mods = {k: templtune.build(sch([x, y]), [x, y], name=f"{name}_{k}")
            for k, sch in (("old", baseline_schedule), ("new", default_schedule))}
    want = ref(a)
    for k, m in mods.items():
        m(a, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, err_msg=k,
                                   atol=1e-6 * max(1.0, float(np.abs(want).max())))
    for threads in (1, 2):
        for m in mods.values():
            m.set_num_threads(threads)
        times: dict[str, list[float]] = {"old": [], "new": [], "numpy": []}
        evals = {k: m.time_evaluator(number=number, repeat=1) for k, m in mods.items()}
        for _ in range(rounds):  # interleaved so that load changes hit all three alike
            for k, ev in evals.items():
                times[k].append(ev(a, out).median)
            times["numpy"].append(_time(lambda: ref(a), number))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:28s} threads={threads}  old {med['old'] * 1e6:8.1f} us  "
              f"new {med['new'] * 1e6:8.1f} us  numpy {med['numpy'] * 1e6:8.1f} us  "
              f"old/new {med['old'] / med['new']:5.2f}x  numpy/new "
              f"{med['numpy'] / med['new']:5.2f}x")


def _maxpool_numpy(a: np.ndarray) -> np.ndarray:
    p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    out = p[:, :, 0:112:2, 0:112:2]
    for dy in range(3):
        for dx in range(3):
            out = np.maximum(out, p[:, :, dy:dy + 112:2, dx:dx + 112:2])
    return out


def _softmax_numpy(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _gelu_numpy(a: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # a benchmark peer only

    return 0.5 * a * (1.0 + erf(a * np.float32(0.5**0.5)))


def _unary(shape: tuple[int, ...], fn: Callable[[te.PrimExpr], te.PrimExpr]
           ) -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder(shape, name="x")
    return x, te.compute(shape, lambda *i: fn(x[i]), name="y", tag="elemwise")


def _softmax(shape: tuple[int, ...]) -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder(shape, name="x")
    return x, topi.nn.softmax(x)


def _pool() -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder((1, 64, 112, 112), name="x")
    return x, topi.nn.pool2d(x, 3, 2, 1, "max")


def _global_pool(shape: tuple[int, ...], layout: str) -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder(shape, name="x")
    return x, topi.nn.global_pool2d(x, "avg", layout)


def _mean_numpy(axes: tuple[int, int]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda a: a.mean(axis=axes, keepdims=True)


def _relayout(shape: tuple[int, ...], dst: str, channels: int = 0
              ) -> tuple[te.Tensor, te.Tensor]:
    from templtune.graph.ops.nchwc import _lt_compute

    x = te.placeholder(shape, name="x")
    return x, _lt_compute([x], {"src_layout": "NCHW", "dst_layout": dst,
                                **({"channels": channels} if channels else {})})


def _pack_numpy(b: int) -> Callable[[np.ndarray], np.ndarray]:
    from templtune.graph.ops.nchwc import pack_data

    return lambda a: pack_data(a, b)


def _layer_norm(shape: tuple[int, ...]) -> tuple[te.Tensor, te.Tensor]:
    """Over the last axis, with a scale and shift computed in the group (inlined)."""
    from templtune.graph.ops.transform import _ln_compute

    x = te.placeholder(shape, name="x")
    c = shape[-1]
    gamma = te.compute((c,), lambda i: 1.0 + i.var.astype("float32") * 0.01, name="gamma")
    beta = te.compute((c,), lambda i: i.var.astype("float32") * -0.02, name="beta")
    return x, _ln_compute([x, gamma, beta], {"axis": len(shape) - 1, "epsilon": 1e-6})


def _layer_norm_numpy(a: np.ndarray) -> np.ndarray:
    from templtune.graph.ops.transform import _ln_ref

    c = np.arange(a.shape[-1], dtype="float32")
    return _ln_ref([a, 1.0 + c * 0.01, c * -0.02], {"axis": a.ndim - 1, "epsilon": 1e-6})


def _gelu(v: te.PrimExpr) -> te.PrimExpr:
    half, one = te.const(0.5, "float32"), te.const(1.0, "float32")
    return v * half * (one + te.erf(v * te.const(0.5**0.5, "float32")))


# name -> (tensors, numpy reference, calls per timing); the ViT-B/16 shapes (197 and 577
# tokens, 12 heads, MLP width 3072) are prime row lengths no vector width divides
CASES: dict[str, tuple[Callable[[], tuple[te.Tensor, te.Tensor]],
                       Callable[[np.ndarray], np.ndarray], int]] = {
    "max_pool 3x3/2 1x64x112x112": (_pool, _maxpool_numpy, 20),
    "softmax 1x1000": (lambda: _softmax((1, 1000)), _softmax_numpy, 500),
    "softmax 12x197x197": (lambda: _softmax((12, 197, 197)), _softmax_numpy, 5),
    "softmax 12x577x577": (lambda: _softmax((12, 577, 577)), _softmax_numpy, 5),
    "softmax 12x576x576": (lambda: _softmax((12, 576, 576)), _softmax_numpy, 5),
    "sigmoid 1x197x3072": (lambda: _unary((1, 197, 3072), te.sigmoid),
                           lambda a: 1.0 / (1.0 + np.exp(-a)), 20),
    "tanh 1x197x3072": (lambda: _unary((1, 197, 3072), te.tanh), np.tanh, 20),
    "gelu(erf) 1x197x3072": (lambda: _unary((1, 197, 3072), _gelu), _gelu_numpy, 20),
    # layer norm over channels: ConvNeXt-tiny's first and last stage, ViT-B/16's tokens
    "layer_norm 1x56x56x96": (lambda: _layer_norm((1, 56, 56, 96)), _layer_norm_numpy, 20),
    "layer_norm 1x7x7x768": (lambda: _layer_norm((1, 7, 7, 768)), _layer_norm_numpy, 100),
    "layer_norm 1x197x768": (lambda: _layer_norm((1, 197, 768)), _layer_norm_numpy, 50),
    # global average pooling: MobileNetV3's and EfficientNet's squeeze-excitation inputs
    # (blocked), ResNet-50's last map channels-last and plain
    "global_pool 1x15x28x28x8c": (lambda: _global_pool((1, 15, 28, 28, 8), "NCHW8c"),
                                  _mean_numpy((2, 3)), 100),
    "global_pool 1x1x112x112x32c": (lambda: _global_pool((1, 1, 112, 112, 32), "NCHW32c"),
                                    _mean_numpy((2, 3)), 50),
    "global_pool 1x7x7x2048 NHWC": (lambda: _global_pool((1, 7, 7, 2048), "NHWC"),
                                    _mean_numpy((1, 2)), 100),
    "global_pool 1x2048x7x7 NCHW": (lambda: _global_pool((1, 2048, 7, 7), "NCHW"),
                                    _mean_numpy((2, 3)), 100),
    # NCHW -> NCHW[x]c: a network's RGB input, ShuffleNet's 116 and 232 channels (116 padded)
    "relayout 1x3x224x224 3c": (lambda: _relayout((1, 3, 224, 224), "NCHW3c"),
                                _pack_numpy(3), 50),
    "relayout 1x116x28x28 8c": (lambda: _relayout((1, 116, 28, 28), "NCHW8c", 116),
                                _pack_numpy(8), 100),
    "relayout 1x232x14x14 8c": (lambda: _relayout((1, 232, 14, 14), "NCHW8c"),
                                _pack_numpy(8), 100),
    "relayout 1x128x28x28 32c": (lambda: _relayout((1, 128, 28, 28), "NCHW32c"),
                                 _pack_numpy(32), 100),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    for name, (make, ref, number) in CASES.items():
        if args.only in name:
            x, y = make()
            _case(name, x, y, ref, args.rounds, number)


if __name__ == "__main__":
    main()
