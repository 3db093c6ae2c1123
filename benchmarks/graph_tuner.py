"""NCHW[x]c layouts and the graph tuner on a whole network (TVM's ``tune_relay_x86`` flow).

1. Extracts the ``conv2d_NCHWc`` tasks of the network (``PassContext(opt_level=3)``) and
   measures, per task, one config of each channel blocking ``(ic_bn, oc_bn)`` in ``--blocks``
   (the register block filling the accumulators) into ``--log`` (reused when it exists);
2. builds the network five ways: NCHW (``AlterOpLayout`` off, packaged reference logs), the
   ``opt_level=3`` default (``AlterOpLayout`` on, packaged logs: convs with a faster NCHW
   record stay NCHW), and with every conv blocked: NCHWc with fallback configs, NCHWc
   per-layer best (``apply_history_best(log)``: each layer its fastest blocking) and NCHWc
   graph-tuned (``DPTuner`` on the same log, measured layout-transform costs,
   ``apply_graph_best``);
3. checks every output against the numpy interpreter and times them in interleaved rounds,
   printing medians and the ratios.

Run: ``python benchmarks/graph_tuner.py [--network resnet-18] [--rounds 7] [--log PATH]
[--threads 1] [--image 224]``. On a shared host the absolute times are noise; the ratios are the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from templtune import autotvm, config, graph  # noqa: E402
from templtune.autotvm import record  # noqa: E402
from templtune.autotvm.graph_tuner import DPTuner  # noqa: E402
from templtune.graph.build import build  # noqa: E402
from templtune.graph.executor import GraphModule  # noqa: E402
from templtune.graph.testing import get_network  # noqa: E402
from templtune.graph.transform import PassContext  # noqa: E402
from templtune.target import Target, capabilities  # noqa: E402


def _configs(task, blocks: list[int]):
    """One config per (ic_bn, oc_bn): the widest register block, unroll_kw on."""
    from templtune.templates.x86._common import target_vector, vec_regs

    lanes, regs = target_vector()
    space = task.config_space
    best = {}
    for idx in range(space.range_length):
        if not space.is_index_valid(idx):
            continue
        cfg = space.get(idx)
        ic, oc = cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]
        ci = task.args[4]
        if oc not in blocks or (ic not in blocks and not (ci < min(blocks) and ic == ci)):
            continue
        if not cfg["unroll_kw"].val:
            continue
        ow = cfg["tile_ow"].size[-1]
        if ow * vec_regs(oc, lanes) <= regs and ow > best.get((ic, oc), (0, None))[0]:
            best[(ic, oc)] = (ow, cfg)
    return [c for _, c in best.values()]


def measure_log(mod, params, target: str, log: Path, blocks: list[int]) -> float:
    """Measure the blockings of every conv2d_NCHWc task into ``log``; seconds spent."""
    t0 = time.time()
    with PassContext(opt_level=3):
        tasks = autotvm.task.extract_from_program(mod, params, target, ops=["nn.conv2d"])
    tasks = [t for t in tasks if t.name == "conv2d_NCHWc"]
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=3, repeat=3))
    n = 0
    for k, task in enumerate(tasks):
        inputs = [autotvm.MeasureInput(task.target, task, c) for c in _configs(task, blocks)]
        batch = autotvm.measure.create_measure_batch(task, option)
        try:
            results = batch(inputs)
        finally:
            batch.close()
        record.append_records(str(log), list(zip(inputs, results)))
        n += len(inputs)
        print(f"  task {k + 1}/{len(tasks)} {task.args}: {len(inputs)} blockings", flush=True)
    print(f"measured {n} configs of {len(tasks)} tasks in {time.time() - t0:.0f} s")
    return time.time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--network", default="resnet-18")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--log", default="nchwc_blockings.log")
    ap.add_argument("--blocks", default="16,32,64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    os.environ["TEMPLTUNE_NUM_THREADS"] = str(args.threads)
    target = "llvm"
    caps = capabilities(Target(target))
    print(f"host: {caps.cpu} ({caps.vector_bits}-bit vectors, {caps.vector_registers} "
          f"registers), {args.threads} thread(s); a shared host: ratios, not times")
    mod, params, shape, _ = get_network(args.network, 1,
                                        image_shape=(3, args.image, args.image))
    log = Path(args.log)
    if not log.exists():
        measure_log(mod, params, target, log, [int(b) for b in args.blocks.split(",")])
    t0 = time.time()
    tuner = DPTuner(mod, {"data": shape}, str(log), ["nn.conv2d"], target, verbose=False)
    tuner.benchmark_layout_transform(min_exec_num=20)
    tuner.run()
    opt = log.with_suffix(".graph_opt.log")
    tuner.write_opt_sch2record_file(opt)
    print(f"graph tuner: {len(tuner.needed_layout_transforms())} transforms measured, "
          f"{time.time() - t0:.0f} s")
    chosen = [[c.record for c in cs].index(r)
              for cs, r in zip(tuner.candidates, tuner.get_optimal_records())]
    greedy = tuner.total_cost([0] * len(chosen))
    print(f"estimated convs + transforms: per-layer best {greedy * 1e3:.2f} ms, graph-tuned "
          f"{tuner.total_cost(chosen) * 1e3:.2f} ms")
    # NOTE: "NCHW" and "opt_level=3 default" use the packaged reference logs (a conv whose
    # NCHW record is faster stays NCHW); the other NCHWc variants block every conv.
    variants = {
        "NCHW": (lambda: autotvm.FallbackContext(), False, True),
        "opt_level=3 default": (lambda: autotvm.FallbackContext(), True, True),
        "NCHWc fallback": (lambda: autotvm.FallbackContext(), True, False),
        "NCHWc per-layer best": (lambda: autotvm.apply_history_best(str(log)), True, False),
        "NCHWc graph-tuned": (lambda: autotvm.apply_graph_best(str(opt)), True, False),
    }
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    expect = graph.evaluate(mod, params, data=x)
    mods = {}
    for name, (ctx, alter, packaged) in variants.items():
        cfg = {"templtune.graph.alter_layout": alter}
        with config.scope(TEMPLTUNE_NO_TOPHUB=not packaged), ctx(), \
                PassContext(opt_level=3, config=cfg):
            lib = build(mod, target, params)
        m = GraphModule(lib["default"]())
        m.run(data=x)
        np.testing.assert_allclose(m.get_output(0).numpy(), expect, rtol=1e-3, atol=1e-4)
        ops = [c.op for c in lib.func.calls()]
        print(f"{name:22s}: {ops.count('nn.contrib_conv2d_NCHWc')} NCHWc convs, "
              f"{ops.count('layout_transform')} layout transforms; output matches numpy")
        mods[name] = m
    times: dict[str, list[float]] = {k: [] for k in mods}
    for _ in range(args.rounds):
        for k, m in mods.items():
            t = time.perf_counter()
            m.run()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    base = med["NCHWc per-layer best"]
    print(f"\n{args.network}, {args.rounds} interleaved rounds, medians:")
    for k, v in med.items():
        print(f"  {k:22s} {v:9.1f} ms   speed vs per-layer best {base / v:5.2f}x")


if __name__ == "__main__":
    main()
