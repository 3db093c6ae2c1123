"""A family's packaged reference log against fallback configs, whole networks built for a
target of that family (default ``llvm -mcpu=haswell``: the AVX2 log, runnable on any AVX2 or
AVX-512 host), outputs checked against the numpy interpreter.

Both builds run in one process, interleaved in ``--rounds`` rounds of 2 runs
(``inference.time_engines``); medians.
Run::

    TEMPLTUNE_NUM_THREADS=1 python3 benchmarks/studies/family_log.py [--target T]
        [--models resnet-18,resnet-50,mobilenet] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference import cpu_name, load_model, time_engines  # noqa: E402

from templtune import config, graph  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="llvm -mcpu=haswell")
    ap.add_argument("--models", default="resnet-18,resnet-50,mobilenet")
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    print(f"host {cpu_name()}; target {a.target!r}; "
          f"{os.environ.get('TEMPLTUNE_NUM_THREADS', 'all')} thread(s)")
    for name in a.models.split(","):
        net, params = load_model(name)
        inp = next(v for v in net.params if v.name not in params)
        x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
        ref = graph.evaluate(net, params, **{inp.name: x})
        runs = {}
        for label, packaged in (("fallback configs", False), ("packaged log", True)):
            with config.scope(TEMPLTUNE_NO_TOPHUB=not packaged), PassContext(opt_level=3):
                lib = graph.build(net, a.target, params)
            m = graph.GraphModule(lib["default"]())
            m.run(**{inp.name: x})
            err = np.abs(m.get_output(0).numpy() - ref).max() / np.abs(ref).max()
            if err > 1e-3:
                raise SystemExit(f"{name} ({label}): relative error {err:.1e} to numpy")
            print(f"  {name} {label}: {lib.num_tuned} of {len(lib.groups)} groups from "
                  f"records, relative error to numpy {err:.1e}")
            runs[label] = m.run
        fb, pk = time_engines(runs, a.rounds, 2, 0.0).values()
        print(f"{name}: fallback {fb:.2f} ms, packaged log {pk:.2f} ms, "
              f"packaged {fb / pk:.2f}x faster (median of {a.rounds} rounds)")


if __name__ == "__main__":
    main()
