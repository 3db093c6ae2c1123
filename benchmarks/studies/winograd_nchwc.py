"""Every point of a ``conv2d_NCHWc_winograd`` space, timed alone (warm), against numpy.

Sweeps one resnet 3x3 stride-1 workload (``H C m``: 56 64 4, 28 128 4, 14 256 2, 7 512 2)
at ``--block``-channel blocks (32 by default), checks each kernel against numpy and prints the
fastest points with and without ``fuse_rows``, in ms and GFLOPS-equivalent (the direct
convolution's FLOPs). Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/winograd_nchwc.py 56 64 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.graph.ops.nchwc import pack_data, pack_kernel, unpack_data  # noqa: E402
from templtune.target import Target  # noqa: E402
from templtune.topi.testing import conv2d_nchw_python  # noqa: E402

TEMPLATE = "conv2d_NCHWc_winograd"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("H", type=int)
    ap.add_argument("C", type=int)
    ap.add_argument("m", type=int, choices=(2, 4))
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--block", type=int, default=32, help="input and output channel block")
    a = ap.parse_args()
    from templtune.templates.x86.conv2d_nchwc_winograd import transform_weight

    bn = a.block
    args = (1, a.H, a.H, a.C, a.C, 3, 3, 1, 1, bn, bn, a.m)
    tgt = Target(a.target)
    task = autotvm.task.create(TEMPLATE, args, tgt)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, a.C, a.H, a.H)).astype("float32")
    w = rng.standard_normal((a.C, a.C, 3, 3)).astype("float32")
    ref = conv2d_nchw_python(x, w, 1, 1)
    dev = templtune.cpu(0)
    space = task.config_space
    best: dict[bool, list[tuple[float, str]]] = {False: [], True: []}
    for i in space.sample_ints(len(space), rng):
        cfg = space.get(i)
        with tgt, autotvm.ApplyConfig(cfg):
            s, ts = task.func(*args)
        f = templtune.build(s, ts, tgt)
        out = np.zeros([int(d) for d in ts[-1].shape], "float32")
        nd = [templtune.nd.array(v, dev) for v in
              (pack_data(x, bn), transform_weight(a.m, bn, bn)(pack_kernel(w, bn, bn)), out)]
        f(*nd)
        err = float(np.abs(unpack_data(nd[2].numpy()) - ref).max())
        if err > 1e-2 * float(np.abs(ref).max()):
            raise SystemExit(f"{cfg}: max |diff| {err} against numpy")
        t = min(f.time_evaluator(f.entry_name, dev, number=10, repeat=3)(*nd).results)
        best[bool(cfg["fuse_rows"].val)].append((t, str(cfg)))
    flop = 2.0 * a.H * a.H * a.C * a.C * 9
    for fused, v in best.items():
        for t, c in sorted(v)[:3]:
            print(f"fuse_rows={fused!s:5} {t * 1e3:7.3f} ms {flop / t / 1e9:6.0f} GFLOPS-eq  {c}")


if __name__ == "__main__":
    main()
