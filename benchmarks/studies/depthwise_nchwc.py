"""MobileNet's blocked depthwise convolutions: the default schedule against the
``depthwise_conv2d_NCHWc`` template, in one process, whole network and per group.

Builds of mobilenet (batch 1, NCHW 224x224, ``relay.build`` at opt_level 3) that differ only
in their 13 depthwise groups, in two settings:

* ``packaged``: under the packaged reference log of the host's ISA family, whose conv records
  give the depthwise convs the blockings they have today (mixed 16c / 32c / 64c: most
  depthwise groups end in a ``layout_transform``);
* ``32c``: reference logs off, the convs on their fallback configs (one 32c blocking, no
  transform between layers), only the log's depthwise records applied.

In each: ``default`` (the template's strategy hidden during the build: what ran before the
template existed) and ``template`` (its records applied); plus ``packaged, template
fallback`` (the packaged log less its depthwise records), and for each ``--log`` the same
pair under that log (over the packaged one). ONNX Runtime runs the same network
as the yardstick. Rounds interleave the engines (``--number`` runs each; thread CPU time at 1
thread, wall clock above), at each of ``--threads``; each round also times every group with
``GraphModule.profile`` and sums the depthwise groups (their fused tails and transforms
included). Medians throughout; the load average is printed (the hosts are shared). Run::

    python3 benchmarks/studies/depthwise_nchwc.py [--rounds 11] [--number 5] [--threads 1,2]
        [--log LOG ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from inference import load_model  # noqa: E402
from peers import ort_engine, to_onnx  # noqa: E402

import templtune  # noqa: E402
from templtune import autotvm, graph  # noqa: E402
from templtune.autotvm import env, strategy  # noqa: E402
from templtune.autotvm.task.reference import FAMILY_LOGS, isa_family  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402

NAME = "depthwise_conv2d_NCHWc"
DW_OP = "nn.contrib_depthwise_conv2d_NCHWc"


@contextlib.contextmanager
def template_hidden(template: str) -> Iterator[None]:
    """The strategies of ``template`` removed from the registry for the block's duration.

    NOTE: the registry has no switch for one template; a study may reach into it.
    """
    strategy.load_templates()
    regs = strategy._STRATEGIES
    hidden = [s for s in regs if s.template == template]
    regs[:] = [s for s in regs if s.template != template]
    try:
        yield
    finally:
        regs.extend(hidden)


def log_without(src: Path, template: str, dst: Path) -> Path:
    """``src`` less the records of ``template``."""
    keep = [line for line in src.read_text().splitlines()
            if line.strip() and json.loads(line)["input"][1] != template]
    dst.write_text("\n".join(keep) + "\n")
    return dst


def build(net: graph.Function, params: dict, ctx: Any) -> tuple[Any, graph.GraphModule]:
    with ctx, PassContext(opt_level=3):
        lib = graph.build(net, "llvm", params)
    return lib, graph.GraphModule(lib)


def set_threads(lib: Any, threads: int) -> None:
    for cg in lib.groups:
        for kernel in cg.kernels:
            kernel.set_num_threads(threads)


def dw_sum(lib: Any, module: graph.GraphModule, number: int) -> float:
    """Seconds of the depthwise groups (their transforms and tails included), one profile."""
    prof = module.profile(number)
    return sum(t for (_, _, t), cg in zip(prof, lib.groups)
               if cg.group.calls[0].op == DW_OP)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--log", action="append", default=[],
                    help="one more setting: this log over the packaged one (default and template)")
    a = ap.parse_args()
    net, params = load_model("mobilenet")
    x = np.random.default_rng(0).uniform(size=(1, 3, 224, 224)).astype("float32")
    inp = next(v.name for v in net.params if v.name not in params)
    family = isa_family("llvm")
    packaged = ROOT / "templates" / "logs" / "cpu" / FAMILY_LOGS[family] if family else None
    tmp = Path(tempfile.mkdtemp())

    @contextlib.contextmanager
    def only_log(path: Path) -> Iterator[None]:
        with env.scope(use_reference_logs=False), autotvm.apply_history_best(str(path)):
            yield

    @contextlib.contextmanager
    def hidden_in(ctx: Any) -> Iterator[None]:
        with template_hidden(NAME), ctx:
            yield

    assert packaged is not None, "no packaged log for this host's ISA family"
    no_dw = log_without(packaged, NAME, tmp / "no_dw.log")
    dw_only = tmp / "dw_only.log"
    dw_only.write_text("".join(line + "\n" for line in packaged.read_text().splitlines()
                               if line.strip() and json.loads(line)["input"][1] == NAME))
    builds = {"packaged, default": template_hidden(NAME),
              "packaged, template fallback": only_log(no_dw),
              "packaged, template": contextlib.nullcontext(),
              "32c, default": hidden_in(only_log(dw_only)),
              "32c, template": only_log(dw_only)}
    for log in a.log:
        label = Path(log).stem
        builds[f"{label}, default"] = hidden_in(autotvm.apply_history_best(log))
        builds[f"{label}, template"] = autotvm.apply_history_best(log)
    libs = {}
    for name, ctx in builds.items():
        lib, module = build(net, params, ctx)
        module.set_input(inp, x)
        impls = {cg.impl for cg in lib.groups if cg.group.calls[0].op == DW_OP}
        tuned = sum(cg.tuned for cg in lib.groups if cg.group.calls[0].op == DW_OP)
        moves = sum(len(cg.steps) > 1 for cg in lib.groups if cg.group.calls[0].op == DW_OP)
        print(f"{name}: depthwise groups run {sorted(impls)}, {tuned} of 13 from records, "
              f"{moves} with a second kernel (a layout_transform)")
        libs[name] = (lib, module)
    ort = ort_engine(to_onnx(net, params).SerializeToString(), x, inp)
    ref = ort.prepare(1)()
    for name, (_, module) in libs.items():
        module.run()
        diff = float(np.abs(module.get_output(0).numpy() - ref).max())
        assert diff < 1e-3 * float(np.abs(ref).max()), (name, diff)
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()}; templtune {templtune.__file__}")
    for threads in (int(t) for t in a.threads.split(",")):
        runs: dict[str, Callable[[], Any]] = {}
        for name, (lib, module) in libs.items():
            set_threads(lib, threads)
            runs[name] = module.run
        runs[ort.name] = ort.prepare(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        ts: dict[str, list[float]] = {k: [] for k in runs}
        dws: dict[str, list[float]] = {k: [] for k in libs}
        for _ in range(a.rounds):
            for name, f in runs.items():
                t0 = clock()
                for _ in range(a.number):
                    f()
                ts[name].append((clock() - t0) / a.number)
            for name, (lib, module) in libs.items():
                dws[name].append(dw_sum(lib, module, a.number))
        o = float(np.median(ts[ort.name]))
        base = {k: float(np.median(ts[f"{k.split(',')[0]}, default"])) for k in libs}
        print(f"-- {threads} thread(s), {a.rounds} rounds of {a.number} runs, {clock.__name__}; "
              f"load average {os.getloadavg()}")
        for name, v in ts.items():
            med = float(np.median(v))
            extra = (f"  depthwise groups {float(np.median(dws[name])) * 1e3:6.3f} ms"
                     if name in dws else "")
            ratio = f"default/this {base[name] / med:5.2f}" if name in base else " " * 18
            print(f"{name:28s} median {med * 1e3:7.2f} ms  {ratio}  ORT/this {o / med:5.2f}"
                  f"{extra}")


if __name__ == "__main__":
    main()
