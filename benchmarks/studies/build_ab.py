"""Same-process A/B of one template constant: a zoo network built twice, ``A`` with the
constant patched, ``B`` as the code has it, timed in alternating rounds; or (``--logs OLD
NEW``) of two tuning logs, ``A`` built under ``OLD`` and ``B`` under ``NEW`` alone (the
packaged logs switched off).

On a shared host two processes can differ by 2x, so a schedule change is judged by two builds
in one process. The constant is read when a build instantiates its templates, so each build
sees its own value; the study checks that the two builds' outputs agree and prints how many
groups' kernels differ (0: the patch changed nothing). The figure is the median of the
per-round time ratios A/B (> 1: B faster) and their 25th percentile. Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/build_ab.py resnet-18 \\
        templates.x86.conv2d_nchwc:STREAM_BYTES=1e12 [--rounds 41]
    python3 benchmarks/studies/build_ab.py /tmp/zoo/resnext50_32x4d.onnx \
        --logs old.log templates/logs/cpu/x86_avx512_256.log
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "1")
THREADS = int(os.environ["TEMPLTUNE_NUM_THREADS"])

from inference import load_model  # noqa: E402

from templtune import graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402


def _build(net, params, x, log=None):
    from contextlib import nullcontext

    from templtune import autotvm

    with autotvm.apply_history_best(log) if log else nullcontext(), PassContext(opt_level=3):
        lib = graph.build(net, "llvm", params)
    gm = graph.GraphModule(lib)
    gm.set_input(next(v.name for v in net.params if v.name not in params), x)
    gm.run()
    asm = [getattr(cg.steps[0].kernel, "get_source", lambda _: "")("asm") for cg in lib.groups]
    return gm, asm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("patch", nargs="?",
                    help="module:NAME=VALUE (VALUE read as a float, int if whole)")
    ap.add_argument("--logs", nargs=2, metavar=("OLD", "NEW"), help="A/B of two tuning logs")
    ap.add_argument("--rounds", type=int, default=41)
    a = ap.parse_args()
    if (a.patch is None) == (a.logs is None):
        ap.error("give a patch or --logs, not both")
    net, params = load_model(a.model)
    x = np.random.default_rng(0).uniform(size=net.params[0].shape).astype("float32")
    if a.logs:
        from templtune.autotvm.env import set_use_reference_logs

        set_use_reference_logs(False)
        (ga, asm_a), (gb, asm_b) = (_build(net, params, x, log) for log in a.logs)
        what = f"A: {a.logs[0]}, B: {a.logs[1]}"
    else:
        where, assign = a.patch.split(":")
        name, value = assign.split("=")
        mod = importlib.import_module(where.replace("templates.", "templtune.templates.", 1))
        val = float(value)
        new = int(val) if val.is_integer() else val
        old = getattr(mod, name)
        setattr(mod, name, new)
        try:
            ga, asm_a = _build(net, params, x)
        finally:
            setattr(mod, name, old)
        gb, asm_b = _build(net, params, x)
        what = f"A: {name}={new}, B: {name}={old}"
    oa, ob = ga.get_output(0).numpy(), gb.get_output(0).numpy()
    diff = float(np.abs(oa - ob).max())
    print(f"{a.model}, {what}; {THREADS} thread(s); "
          f"max |A-B| {diff:.3g} (output range {float(np.abs(ob).max()):.3g}); "
          f"kernels differ in {sum(p != q for p, q in zip(asm_a, asm_b))} of {len(asm_b)} groups")
    clock = time.thread_time if THREADS == 1 else time.perf_counter
    ts: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(a.rounds):
        for k, gm in (("A", ga), ("B", gb)):
            gm.module.run()
            t = clock()
            for _ in range(3):
                gm.module.run()
            ts[k].append((clock() - t) / 3)
    ratios = sorted(p / q for p, q in zip(ts["A"], ts["B"]))
    print(f"A median {statistics.median(ts['A']) * 1e3:.2f} ms, B median "
          f"{statistics.median(ts['B']) * 1e3:.2f} ms; A/B per round: median "
          f"{statistics.median(ratios):.3f}, p25 {ratios[len(ratios) // 4]:.3f} "
          f"({a.rounds} rounds of 3 runs)")


if __name__ == "__main__":
    main()
