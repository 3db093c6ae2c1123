"""Throughput of the inline float32 math functions (``codegen/llvm/vmath.py``): each one over
``--elements`` standard-normal values scaled by ``--scale`` (2^20 by default; 2^14 stay in
L1, which times the arithmetic alone), vectorized by the host's register lanes, on one thread;
the minimum of ``--repeat`` timings of ``--number`` calls, in ns per vector and per element. Run::

    python3 benchmarks/studies/vmath_speed.py [--funcs exp,tanh,sigmoid,erf] [--scale 1.5]
        [--elements 16384]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import templtune  # noqa: E402
from templtune import te  # noqa: E402
from templtune.templates.x86._common import host_vector  # noqa: E402


def ns_per_vector(name: str, lanes: int, scale: float, number: int, repeat: int,
                  n: int = 1 << 20) -> float:
    """Seconds per ``lanes``-wide vector of ``name`` over ``n`` values, in ns."""
    a = te.placeholder((n,), name="a")
    fn = getattr(te, name)
    b = te.compute((n,), lambda i: fn(a[i]), name="b")
    s = te.create_schedule(b.op)
    _, inner = s[b].split(b.op.axis[0], factor=lanes)
    s[b].vectorize(inner)
    f = templtune.build(s, [a, b], "llvm -num-cores=1")
    x = (np.random.default_rng(0).standard_normal(n) * scale).astype("float32")
    args = [templtune.nd.array(x), templtune.nd.array(np.zeros(n, "float32"))]
    res = f.time_evaluator(f.entry_name, templtune.cpu(0), number=number, repeat=repeat)(*args)
    return min(res.results) / (n / lanes) * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--funcs", default="exp,tanh,sigmoid,erf")
    ap.add_argument("--scale", type=float, default=1.5, help="standard deviation of the inputs")
    ap.add_argument("--number", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--elements", type=int, default=1 << 20)
    args = ap.parse_args()
    lanes = host_vector()[0]
    for name in args.funcs.split(","):
        t = ns_per_vector(name, lanes, args.scale, args.number, args.repeat,
                          args.elements)
        print(f"{name:8s} {t:6.2f} ns per {lanes} lanes ({t / lanes:.3f} ns per element)")


if __name__ == "__main__":
    main()
