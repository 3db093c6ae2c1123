"""Which ``conv2d_NCHWc`` blocks are fast on this host: each resnet-18 conv with uniform channel
blocks (``ic_bn = oc_bn = B``, so the network needs no layout transform between convs) and
every register block ``ow_bn`` x ``oc_bn`` of the space, against ONNX Runtime on the same conv.

Timing: one thread, thread CPU time of 2 calls, ``--rounds`` rounds interleaved over all the
layer's candidates and ORT; the minimum and the 25th percentile of the rounds are reported
(on a host shared with other processes the median is inflated by their cache traffic, the
low quantiles agree with each other). Ratios are ORT time / templtune time. Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/conv_blocks.py [--blocks 16,32,64]
        [--layers 1,4] [--rounds 40] [--conv 1,56,56,256,64,1,1,1,0 ...]
        [--specs "16,16,4,0;16,16,14,0"]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv_layers import (  # noqa: E402
    LAYERS,
    config_of,
    load_templates,
    ort_conv,
    templtune_conv,
    timed,
)


def candidates(args: tuple, blocks: list[int]) -> list[str]:
    """``ic,oc,ow,kw`` specs: uniform blocks ``B``, every ``ow_bn`` dividing the output width
    with between 8 and the host's accumulator registers (28 zmm, 14 ymm), ``unroll_kw`` on
    and off."""
    from templtune.templates.x86._common import target_vector

    lanes, regs = target_vector()
    n, h, w, co, ci, kh, kw, s, p = args
    ow = (w + 2 * p - kw) // s + 1
    out = []
    for b in blocks:
        if co % b or ci % b:
            continue
        for owb in range(1, min(ow, 32) + 1):
            if ow % owb or not 8 <= owb * max(1, b // lanes) <= regs:
                continue
            for u in ((0, 1) if kw > 1 else (1,)):
                out.append(f"{b},{b},{owb},{u}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", default="16,32,64")
    ap.add_argument("--layers", default="1,2,3,4,5,6,7,8,9,10")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--conv", action="append", default=[],
                    help="N,H,W,CO,CI,KH,KW,stride,pad: a conv to time instead of --layers")
    ap.add_argument("--specs", default="",
                    help="ic,oc,ow,unroll specs separated by ';' instead of the candidates")
    a = ap.parse_args()
    load_templates()
    blocks = [int(b) for b in a.blocks.split(",")]
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()}; {a.rounds} rounds of 2 calls, thread time")
    convs = ([tuple(int(v) for v in c.split(",")) for c in a.conv]
             or [LAYERS[int(i)][0] for i in a.layers.split(",")])
    for args in convs:
        n, h, w, co, ci, kh, kw, s, p = args
        x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
        k = (rng.standard_normal((co, ci, kh, kw)) * 0.1).astype(np.float32)
        runs = {"ORT": ort_conv(args, x, k)}
        for c in (a.specs.split(";") if a.specs else candidates(args, blocks)):
            runs[c] = templtune_conv(args, config_of(c), x, k)[0]
        res: dict[str, list[float]] = {c: [] for c in runs}
        for _ in range(a.rounds):
            for c, f in runs.items():
                f()
                res[c].append(timed(f, 2))
        mo, qo = np.min(res["ORT"]), np.percentile(res["ORT"], 25)
        print(f"== {h}x{w} {ci}->{co} {kh}x{kw} /{s}: ORT {mo * 1e3:.3f} ms (min)")
        rows = sorted(((mo / np.min(v), qo / np.percentile(v, 25), c)
                       for c, v in res.items() if c != "ORT"), reverse=True)
        for r_min, r_q, c in rows:
            print(f"  {c:14s} ORT/tt min {r_min:5.2f}  p25 {r_q:5.2f}")
        sys.stdout.flush()
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
