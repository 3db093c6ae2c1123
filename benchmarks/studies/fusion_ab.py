"""An ONNX model built twice in one process, with and without some of the network-level
rewrites, timed interleaved (``TEMPLTUNE_NUM_THREADS`` threads).

``--off`` names what the "without" build switches off, by replacing the function for its
duration: ``diamonds`` (element-wise diamond fusion, ``fuse._join_diamonds``), ``simplify``
(the ``SimplifyExpr`` reshape sinking, ``build.simplify_for_fusion``), ``views`` (reshape
groups as views, ``build._Compiler.view``), ``transposes`` (transposes of unit axes as
reshapes, ``simplify._as_reshape``), ``operands`` (a full-shape operand reshaped so a reshape
sinks, ``simplify._full_operand``), ``rows`` (row-wise default groups computed per row,
``default_schedules._row_rank``), ``flags`` (transposes folded into ``nn.batch_matmul``'s
flags, ``simplify._fold_transposes``), ``attention`` (``batch_matmul -> softmax ->
batch_matmul`` as one ``nn.batch_attention`` kernel, ``build.fuse_attention_for``),
``records`` (the packaged reference logs: fallback configs where they have the workload,
``env.reference_logs_enabled``). The first-operand rule for residual adds stays on.
Outputs are cross-checked. Run::

    python3 benchmarks/vit_onnx.py --out /tmp/vit.onnx
    TEMPLTUNE_NUM_THREADS=2 python3 benchmarks/studies/fusion_ab.py /tmp/vit.onnx \
        [--off diamonds,simplify,views] [--rounds 9]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from models import load_model  # noqa: E402

from templtune import graph  # noqa: E402
from templtune.autotvm import env  # noqa: E402
from templtune.graph import default_schedules, fuse, simplify  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402

build_mod = importlib.import_module("templtune.graph.build")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file (static input shape)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--number", type=int, default=3, help="runs per build per round")
    ap.add_argument("--off", default="diamonds,simplify", help="comma-separated: "
                    "diamonds, simplify, views, transposes, operands, rows, flags, attention, records")
    a = ap.parse_args()
    threads = int(os.environ.get("TEMPLTUNE_NUM_THREADS", "2"))
    net, params = load_model(str(Path(a.model).resolve()))
    data = next(v for v in net.params if v.name not in params)
    x = np.random.default_rng(0).uniform(size=data.shape).astype("float32")

    def build() -> graph.GraphModule:
        with PassContext(opt_level=3):
            lib = graph.build(net, f"llvm -num-cores={threads}", params)
        m = graph.GraphModule(lib)
        m.set_input(data.name, x)
        m.run()
        return m

    new = build()
    patches = {"diamonds": (fuse, "_join_diamonds", lambda *args, **kw: None),
               "simplify": (build_mod, "simplify_for_fusion", lambda f, pc: f),
               "views": (build_mod._Compiler, "view", lambda self, calls, src: None),
               "transposes": (simplify, "_as_reshape", lambda c, arg: None),
               "operands": (simplify, "_full_operand", lambda o, r, memo: None),
               "rows": (default_schedules, "_row_rank", lambda stages, out: 0),
               "flags": (simplify, "_fold_transposes", lambda c, args, only: None),
               "attention": (build_mod, "fuse_attention_for", lambda f, pc, tgt: f),
               "records": (env, "reference_logs_enabled", lambda: False)}
    off = [patches[k] for k in a.off.split(",")]
    saved = [getattr(obj, name) for obj, name, _ in off]
    for obj, name, fn in off:
        setattr(obj, name, fn)
    try:
        old = build()
    finally:
        for (obj, name, _), fn in zip(off, saved):
            setattr(obj, name, fn)
    np.testing.assert_allclose(new.get_output(0).numpy(), old.get_output(0).numpy(),
                               rtol=1e-4, atol=1e-5)
    print(f"{Path(a.model).stem}: {len(new.module.calls)} steps with, "
          f"{len(old.module.calls)} without {a.off}; outputs agree")
    times: dict[str, list[float]] = {"with": [], "without": []}
    for r in range(a.rounds):
        order = [("with", new), ("without", old)]
        for name, m in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            for _ in range(a.number):
                m.run()
            times[name].append((time.perf_counter() - t0) / a.number)
    w, wo = np.array(times["with"]), np.array(times["without"])
    print(f"{threads} thread(s), {a.rounds} rounds: with {np.median(w) * 1e3:.2f} ms, without "
          f"{np.median(wo) * 1e3:.2f} ms; without/with {np.median(wo / w):.3f} "
          "(median of per-round ratios)")


if __name__ == "__main__":
    main()
