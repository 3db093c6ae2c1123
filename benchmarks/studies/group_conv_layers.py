"""Grouped 3x3 convolutions alone: ``group_conv2d_NCHWc.x86`` under its fallback config (the
blocks the network runs untuned) against ONNX Runtime's grouped Conv on the same layer (a
one-node model, NCHW in and out), ``TEMPLTUNE_NUM_THREADS`` threads (default 1) for both, min
of 7 x 20 calls. Layers are ``H:C:S:G`` (input H x H, C channels in and out, stride S, G
groups); the default is ResNeXt-50 32x4d's and RegNet-Y-400MF's. Run::

    python3 benchmarks/studies/group_conv_layers.py [56:128:1:32,28:256:1:32,...]
    PYTHONPATH=benchmarks/studies/avx2_proxy python3 benchmarks/studies/group_conv_layers.py
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.autotvm.strategy import load_templates  # noqa: E402
from templtune.target import Target  # noqa: E402

LAYERS = ("56:128:1:32,56:256:2:32,28:256:1:32,28:512:2:32,14:512:1:32,14:1024:2:32,"
          "7:1024:1:32,112:48:2:6,56:48:1:6,56:104:2:13,28:104:1:13,28:208:2:26,14:208:1:26,"
          "14:440:2:55,7:440:1:55")
THREADS = int(os.environ.get("TEMPLTUNE_NUM_THREADS", "1"))


def templtune_seconds(args: tuple[int, ...]) -> tuple[float, tuple[int, ...]]:
    """The fallback kernel's seconds per call and its kernel's (blocked) shape."""
    tgt = Target(f"llvm -num-cores={THREADS}")
    task = autotvm.task.create("group_conv2d_NCHWc.x86", args, tgt)
    with tgt:
        s, ts = task.func(*args)
    f = templtune.build(s, ts, tgt)
    rng = np.random.default_rng(0)
    nd = [templtune.nd.array(rng.standard_normal([int(d) for d in t.shape]).astype("float32"))
          for t in ts]
    res = f.time_evaluator(f.entry_name, templtune.cpu(0), number=20, repeat=7)(*nd)
    return min(res.results), tuple(int(d) for d in ts[1].shape)


def ort_seconds(h: int, c: int, stride: int, groups: int) -> float:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).standard_normal((c, c // groups, 3, 3)).astype("float32")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=groups, pads=[1, 1, 1, 1],
                            strides=[stride, stride], kernel_shape=[3, 3])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype("float32")
    for _ in range(5):
        sess.run(None, {"x": x})
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(20):
            sess.run(None, {"x": x})
        best = min(best, (time.perf_counter() - t) / 20)
    return best


def main() -> None:
    logging.disable(logging.WARNING)
    load_templates()
    for layer in (sys.argv[1] if len(sys.argv) > 1 else LAYERS).split(","):
        h, c, s, g = (int(v) for v in layer.split(":"))
        t, kshape = templtune_seconds((1, h, h, c, c, 3, 3, s, 1, g))
        oh = (h + 2 - 3) // s + 1
        gflop = 2 * oh * oh * c * (c // g) * 9 / 1e9
        t_ort = ort_seconds(h, c, s, g)
        print(f"{h:3d}x{h:<3d} {c:4d} s{s} g{g:<3d} templtune {t * 1e3:7.3f} ms "
              f"({gflop / t:5.1f} GFLOPS, kernel {kshape})  ORT {t_ort * 1e3:7.3f} ms  "
              f"ORT / templtune {t_ort / t:4.2f}", flush=True)


if __name__ == "__main__":
    main()
