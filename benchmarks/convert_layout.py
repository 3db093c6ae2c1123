"""ConvertLayout on the auto-scheduler path: an NCHW zoo network converted to NHWC vs the same
network built NHWC natively, both compiled with one auto-scheduler log.

Both are checked against the numpy interpreter, then timed interleaved in rounds (1 and 2
threads) and the medians and their ratio printed. The weights differ (each zoo layout draws its
own); the kernels, hence the times, should not.

Run: ``python benchmarks/convert_layout.py --log LOG [--network resnet-18] [--image 224]``; the log
comes from ``templtune tune-network resnet-18 --layout NHWC --trials N --log LOG``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from templtune import auto_scheduler, graph, relay, transform  # noqa: E402


def _ms(run: Any, number: int) -> float:
    t = time.perf_counter()
    for _ in range(number):
        run()
    return (time.perf_counter() - t) / number * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="resnet-18")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--log", required=True, help="auto-scheduler records (NHWC tasks)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()

    nchw, p_nchw, s_nchw, _ = graph.testing.get_network(a.network, 1, "NCHW",
                                                        image_shape=(3, a.image, a.image))
    nhwc, p_nhwc, s_nhwc, _ = graph.testing.get_network(a.network, 1, "NHWC",
                                                        image_shape=(a.image, a.image, 3))
    seq = transform.Sequential([relay.transform.RemoveUnusedFunctions(),
                                relay.transform.ConvertLayout({"nn.conv2d": ["NHWC", "default"]})])
    with transform.PassContext(opt_level=3):
        converted = seq(nchw)
    rng = np.random.default_rng(0)
    modules = {}
    with auto_scheduler.ApplyHistoryBest(a.log):
        for label, net, ref, params, shape in (
                ("native NHWC", nhwc, nhwc, p_nhwc, s_nhwc),
                ("NCHW + ConvertLayout", converted, nchw, p_nchw, s_nchw)):
            lib = relay.build(net, "llvm", params=params)
            m = graph.GraphModule(lib)
            x = rng.uniform(size=shape).astype("float32")
            m.set_input("data", x)
            m.run()
            np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(ref, params, data=x),
                                       rtol=1e-3, atol=1e-5)
            print(f"{label:22s}: {len(lib.groups)} groups, {lib.num_tuned} from records; "
                  f"matches numpy")
            modules[label] = (m, lib)
    for nt in (int(t) for t in a.threads.split(",")):
        times: dict[str, list[float]] = {k: [] for k in modules}
        for m, lib in modules.values():
            for cg in lib.groups:
                for kernel in cg.kernels:
                    kernel.set_num_threads(nt)
            m.run()
        for _ in range(a.rounds):  # interleaved: both see the same machine load
            for label, (m, _) in modules.items():
                times[label].append(_ms(m.run, a.number))
        med = {k: statistics.median(v) for k, v in times.items()}
        native, conv = med["native NHWC"], med["NCHW + ConvertLayout"]
        print(f"{nt} thread(s), median of {a.rounds} rounds: native NHWC {native:7.2f} ms   "
              f"NCHW + ConvertLayout {conv:7.2f} ms   converted / native {conv / native:.3f}")


if __name__ == "__main__":
    main()
