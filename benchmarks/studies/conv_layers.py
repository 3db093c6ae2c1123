"""resnet-18's convolutions one by one: templtune's ``conv2d_NCHWc`` under a log's best record
against ONNX Runtime on the same conv (a one-node ONNX model, same weights), 1 thread.

Each layer's kernels (ORT's and one per ``--log``: that log's best record) are timed
interleaved in rounds of 2 calls in thread CPU time (the slices other processes of a shared
host take do not count); the ratio is ORT time / templtune time (> 1: templtune faster) from
the rounds' minimum, with the medians' ratio in parentheses. Outputs are cross-checked. ORT
converts a lone conv's NCHW input and output to its blocked layout inside the timed call,
which a network's inner convs do not pay. Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/conv_layers.py [--log OLD --log NEW]
        [--rounds 21] [--config 'CO,CI,H,S:ic,oc,ow,kw' ...]

``--config`` overrides the record of one layer (``kw`` 1/0: ``unroll_kw``) to try a block.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "1")

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.autotvm.space import ConfigEntity  # noqa: E402
from templtune.autotvm.strategy import load_templates  # noqa: E402
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data  # noqa: E402
from templtune.target import Target  # noqa: E402

LOG = ROOT / "templates" / "logs" / "cpu" / "x86_avx512.log"
#: resnet-18's conv workloads, ``(N, H, W, CO, CI, KH, KW, stride, pad)`` with their count
LAYERS = (
    ((1, 224, 224, 64, 3, 7, 7, 2, 3), 1),
    ((1, 56, 56, 64, 64, 3, 3, 1, 1), 4),
    ((1, 56, 56, 128, 64, 3, 3, 2, 1), 1),
    ((1, 56, 56, 128, 64, 1, 1, 2, 0), 1),
    ((1, 28, 28, 128, 128, 3, 3, 1, 1), 3),
    ((1, 28, 28, 256, 128, 3, 3, 2, 1), 1),
    ((1, 28, 28, 256, 128, 1, 1, 2, 0), 1),
    ((1, 14, 14, 256, 256, 3, 3, 1, 1), 3),
    ((1, 14, 14, 512, 256, 3, 3, 2, 1), 1),
    ((1, 14, 14, 512, 256, 1, 1, 2, 0), 1),
    ((1, 7, 7, 512, 512, 3, 3, 1, 1), 3),
)


def best_records(log: Path) -> dict[tuple[int, ...], dict]:
    """The fastest successful ``conv2d_NCHWc`` record of each workload in ``log``."""
    best: dict[tuple[int, ...], tuple[float, dict]] = {}
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if r["input"][1] != "conv2d_NCHWc" or r["result"][1] != 0:
            continue
        key, t = tuple(r["input"][2]), float(np.mean(r["result"][0]))
        if key not in best or t < best[key][0]:
            best[key] = (t, r["config"])
    return {k: v[1] for k, v in best.items()}


def config_of(spec: str) -> ConfigEntity:
    ic, oc, ow, kw = (int(v) for v in spec.split(","))
    return ConfigEntity.from_json_dict({"index": 0, "entity": [
        ["tile_ic", "sp", [-1, ic]], ["tile_oc", "sp", [-1, oc]], ["tile_ow", "sp", [-1, ow]],
        ["unroll_kw", "ot", bool(kw)]]})


def templtune_conv(args: tuple, cfg: ConfigEntity, x: np.ndarray, k: np.ndarray):
    task = autotvm.task.create("conv2d_NCHWc", args, "llvm")
    with Target("llvm"), autotvm.ApplyConfig(cfg):
        sch, tensors = task.func(*args)
    mod = templtune.build(sch, tensors, target="llvm")
    ic_bn, oc_bn = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
    xd, kd = pack_data(x, ic_bn), pack_kernel(k, ic_bn, oc_bn)
    out = np.zeros(tuple(int(d) for d in tensors[2].shape), np.float32)

    def run() -> np.ndarray:
        mod(xd, kd, out)
        return out

    return run, lambda: unpack_data(out)


def ort_conv(args: tuple, x: np.ndarray, k: np.ndarray):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n, h, w, co, ci, kh, kw, s, p = args
    oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[p] * 4, strides=[s, s],
                            kernel_shape=[kh, kw])
    g = helper.make_graph([node], "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [n, co, oh, ow])], [numpy_helper.from_array(k, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})[0]


def timed(fn, reps: int) -> float:
    t0 = time.thread_time()
    for _ in range(reps):
        fn()
    return (time.thread_time() - t0) / reps


def _short(cfg: ConfigEntity) -> str:
    c = "/".join(str(cfg[kn].size[-1]) for kn in ("tile_ic", "tile_oc", "tile_ow"))
    return c + "/" + str(int(cfg["unroll_kw"].val))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", type=Path, action="append", default=[],
                    help="AutoTVM log (repeat to compare logs; default the packaged one)")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--config", action="append", default=[],
                    help="'CO,CI,H,S:ic,oc,ow,kw' overrides one layer's record")
    ap.add_argument("--layers", default="", help="comma-separated layer indices (default all)")
    a = ap.parse_args()
    load_templates()
    logs = a.log or [LOG]
    records = [best_records(log) for log in logs]
    override = {}
    for spec in a.config:
        key, cfg = spec.split(":")
        override[tuple(int(v) for v in key.split(","))] = config_of(cfg)
    pick = {int(i) for i in a.layers.split(",") if i} or set(range(len(LAYERS)))
    print(f"load average {os.getloadavg()}; {a.rounds} rounds of 2 calls, thread time; "
          f"ratio = ORT time / templtune time, from the min (median) of the rounds")
    for j, log in enumerate(logs):
        print(f"  log {j}: {log}")
    print(f"{'layer (H CI->CO kxk /s)':26s} {'ORT ms':>7s} {'GFLOPS':>6s} " + "  ".join(
        f"{'log ' + str(j) + ' ic/oc/ow/kw':16s} {'ms':>6s} {'GFLOPS':>6s} {'ratio':>11s}"
        for j in range(len(logs))))
    rng = np.random.default_rng(0)
    tot_o, tot_t = 0.0, [0.0] * len(logs)
    for i, (args, count) in enumerate(LAYERS):
        if i not in pick:
            continue
        n, h, w, co, ci, kh, kw, s, p = args
        x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
        k = (rng.standard_normal((co, ci, kh, kw)) * 0.1).astype(np.float32)
        orun = ort_conv(args, x, k)
        ref = orun()
        cfgs, runs = [], []
        for rec in records:
            cfg = override.get((co, ci, h, s)) or ConfigEntity.from_json_dict(rec[args])
            tt, result = templtune_conv(args, cfg, x, k)
            tt()
            np.testing.assert_allclose(result(), ref, rtol=1e-3, atol=1e-3)
            cfgs.append(cfg)
            runs.append(tt)
        flop = 2.0 * n * co * ci * kh * kw * ((h + 2 * p - kh) // s + 1) * \
            ((w + 2 * p - kw) // s + 1)
        samples: list[list[float]] = [[] for _ in range(len(runs) + 1)]
        for _ in range(a.rounds):
            for f, v in zip([orun, *runs], samples):
                f()
                v.append(timed(f, 2))
        mins = [float(np.min(v)) for v in samples]
        meds = [float(np.median(v)) for v in samples]
        tot_o += count * mins[0]
        name = f"{h}x{w} {ci}->{co} {kh}x{kw} /{s}" + (f" x{count}" if count > 1 else "")
        cols = []
        for j, cfg in enumerate(cfgs):
            tot_t[j] += count * mins[j + 1]
            cols.append(f"{_short(cfg):16s} {mins[j + 1] * 1e3:6.3f} "
                        f"{flop / mins[j + 1] / 1e9:6.1f} {mins[0] / mins[j + 1]:5.2f} "
                        f"({meds[0] / meds[j + 1]:4.2f})")
        print(f"{name:26s} {mins[0] * 1e3:7.3f} {flop / mins[0] / 1e9:6.1f} " + "  ".join(cols))
        sys.stdout.flush()
    print(f"sum over the network's convs (x count, min times): ORT {tot_o * 1e3:.2f} ms; " +
          "; ".join(f"log {j} {t * 1e3:.2f} ms, ratio {tot_o / t:.2f}"
                    for j, t in enumerate(tot_t)))
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
