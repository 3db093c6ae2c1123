"""How idle time between engines (``benchmarks/inference.py --settle``) changes templtune's
and ONNX Runtime's times: both engines in one process, interleaved rounds
(``inference.time_engines``), once per ``--settle`` value, and templtune alone without it.
Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/engine_settle.py [--model resnet-18]
        [--settle 0,0.05] [--rounds 9] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference import cpu_name, load_model, time_engines  # noqa: E402
from peers import peer_engines, templtune_engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet-18")
    ap.add_argument("--settle", default="0,0.05", help="idle seconds, comma-separated")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    net, params = load_model(a.model)
    inp = next(v for v in net.params if v.name not in params)
    x = np.random.default_rng(0).uniform(size=inp.shape).astype(np.float32)
    tt = templtune_engine("templtune", net, params, x).prepare(a.threads)
    print(f"{cpu_name()}; {a.model}, {a.threads} thread(s), {a.rounds} rounds x {a.number} "
          "calls, medians")
    alone = time_engines({"templtune": tt}, a.rounds, a.number, 0.0)["templtune"]
    print(f"  templtune alone, before ORT's session exists: {alone:8.2f} ms")
    ort = peer_engines(net, params, x, ("ort",))[0][0].prepare(a.threads)
    alone = time_engines({"templtune": tt}, a.rounds, a.number, 0.0)["templtune"]
    print(f"  templtune alone, after ORT's session is made: {alone:8.2f} ms")
    for settle in (float(v) for v in a.settle.split(",")):
        t = time_engines({"templtune": tt, "ort": ort}, a.rounds, a.number, settle)
        print(f"  settle {settle:4.2f} s: templtune {t['templtune']:8.2f} ms, ORT "
              f"{t['ort']:8.2f} ms, templtune / ORT speed {t['ort'] / t['templtune']:.2f}")


if __name__ == "__main__":
    main()
