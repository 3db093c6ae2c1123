"""``templtune tune-network NAME|MODEL.onnx``: the network-tuning tutorials as one command.

NAME is a zoo network; an ``.onnx`` file is imported with :func:`graph.frontend.from_onnx`
(``--input-shape NAME:D0,D1,...`` fixes an input's shape). ONNX models are NCHW: with
``--layout NHWC`` their convolutions are converted by ``relay.transform.ConvertLayout`` (the
input and output keep the model's layout), the layout the auto-scheduler tunes best.

``--method auto_scheduler`` (default) extracts the auto-scheduler tasks of a zoo network and
tunes them under one trial budget with the task scheduler (resuming from the log when it
exists); ``--method autotvm`` extracts the template tasks of its conv2d/dense layers
(``autotvm.task.extract_from_program``) and tunes each with a tuner for ``--trials-per-task``
trials. Either way the network is then compiled with the best records, checked against the
numpy interpreter, and timed.

Both show a progress bar on stderr (trials, the estimated latency, ETA), stop at
``--time-budget`` seconds, and write the task table (weights, FLOPs) next to the log for
``templtune report``. ``--rpc-key`` measures on the Ray devices advertising that key
(``RPCRunner``; ``--rpc-address`` names the cluster).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from templtune.cli.main import CliError, command
from templtune.cli.tune_cmd import (
    check_log_path,
    parse_int_list,
    positive_float,
    positive_int,
    tune_task,
    tuner_names,
)

if TYPE_CHECKING:
    from templtune.graph.build import GraphExecutorFactoryModule
    from templtune.graph.ir import Function


class _NetworkProgress:
    """Task-scheduler callback: one tqdm bar over the whole trial budget (stderr) showing the
    estimated latency, and the end of tuning once ``time_budget`` seconds are spent."""

    def __init__(self, total: int, time_budget: float | None, show: bool) -> None:
        self.total, self.time_budget, self.show = total, time_budget, show
        self.bar: Any = None
        self.start = time.time()

    def pre_tune(self, scheduler: Any, task_id: int) -> None:
        if self.show and self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc="tune-network", unit="trial",
                            file=sys.stderr, dynamic_ncols=True)

    def post_tune(self, scheduler: Any, task_id: int) -> None:
        if self.bar is not None:
            lat = scheduler.cur_score
            est = f"{lat * 1e3:.3f} ms" if lat < 1e9 else "-"
            self.bar.set_postfix_str(f"est. latency {est} | task {task_id}", refresh=False)
            self.bar.update(min(scheduler.ct, self.total) - self.bar.n)
        if self.time_budget is not None and time.time() - self.start >= self.time_budget:
            # NOTE: the scheduler loops while ct < num_measure_trials; lowering the budget to
            # the trials done ends it after this round, as TVM's scheduler ends on trials.
            scheduler.tune_option.num_measure_trials = scheduler.ct

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _rpc_address(text: str | None) -> tuple[str | None, int | None]:
    """``HOST:PORT`` / ``ray://HOST:PORT`` / ``auto`` -> (host, port)."""
    if not text:
        return None, None
    host, _, port = text.rpartition(":")
    if host and port.isdigit():
        return host, int(port)
    return text, None


def _runner(args: argparse.Namespace, kind: Any, **local: Any) -> Any:
    """``kind.LocalRunner(**local)``, or with ``--rpc-key`` ``kind.RPCRunner`` on that key
    (``kind``: the autotvm or auto_scheduler module)."""
    if not args.rpc_key:
        return kind.LocalRunner(**local)
    host, port = _rpc_address(args.rpc_address)
    try:
        return kind.RPCRunner(args.rpc_key, host=host, port=port, **local)
    except ImportError as exc:
        raise CliError(str(exc)) from None
    except (RuntimeError, ConnectionError) as exc:  # no device for the key, cluster unreachable
        raise CliError(f"--rpc-key {args.rpc_key}: {exc}") from None


def _print_tasks(tasks: list, weights: list) -> None:
    print(f"{'ID':>3}  {'weight':>6}  {'MFLOP':>9}  task")
    for i, (t, w) in enumerate(zip(tasks, weights)):
        print(f"{i:>3}  {w:>6}  {t.compute_dag.flop_ct / 1e6:9.2f}  {t.desc}")


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``--input-shape NAME:D0,D1,...`` (repeatable) as ``{name: shape}``."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.rpartition(":")
        if not sep or not name:
            raise CliError(f"--input-shape takes NAME:D0,D1,... (e.g. data:1,3,224,224), "
                           f"got {spec!r}")
        out[name] = parse_int_list(dims)
    return out


def _load_onnx(args: argparse.Namespace) -> tuple[Any, dict, dict[str, tuple[int, ...]]]:
    """``(network, params, {input name: shape})`` of the ONNX file ``args.network``."""
    from templtune import graph

    try:
        import onnx
    except ImportError:
        raise CliError("an .onnx network needs the onnx package (pip install onnx)") from None
    shapes = parse_input_shapes(args.input_shape)
    try:
        model = onnx.load(args.network)
    except Exception as exc:  # noqa: BLE001 - onnx raises protobuf's own errors
        raise CliError(f"cannot read ONNX model {args.network!r}: {exc}") from None
    names = [i.name for i in model.graph.input
             if i.name not in {t.name for t in model.graph.initializer}]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise CliError(f"--input-shape names {unknown}, but the model's inputs are {names}")
    try:
        net, params = graph.frontend.from_onnx(model, shape=shapes)
    except graph.GraphError as exc:
        raise CliError(str(exc)) from None
    return net, params, {v.name: v.shape for v in net.params if v.name not in params}


def convert_to_nhwc(net: Function) -> Function:
    """``net`` with its convolutions in NHWC (TVM's ConvertLayout recipe, under opt_level 3)."""
    from templtune.graph.convert_layout import ConvertLayout, RemoveUnusedFunctions
    from templtune.graph.transform import PassContext, Sequential

    seq = Sequential([RemoveUnusedFunctions(), ConvertLayout({"nn.conv2d": ["NHWC", "default"]})])
    with PassContext(opt_level=3):
        return seq(net)


def cmd_tune_network(args: argparse.Namespace) -> int:
    from templtune import auto_scheduler, graph
    from templtune.errors import TargetError
    from templtune.target import Target

    try:
        Target(args.target)
    except TargetError as exc:
        raise CliError(f"--target {args.target!r}: {exc}") from None

    is_onnx = args.network.lower().endswith(".onnx")
    if is_onnx:
        if not os.path.isfile(args.network):
            raise CliError(f"ONNX model {args.network!r} does not exist")
        net, params, inputs = _load_onnx(args)
        stem = os.path.splitext(os.path.basename(args.network))[0]
        shape_tag = "_".join("x".join(map(str, s)) for s in inputs.values())
        label = f"{stem}-{shape_tag}"
        if args.layout == "NHWC":
            ref_net, net = net, convert_to_nhwc(net)
            label += "-NHWC"
            print("converted the model's convolutions to NHWC (ConvertLayout)")
    else:
        if args.input_shape:
            raise CliError("--input-shape applies to .onnx models; zoo networks take "
                           "--image-shape C,H,W and --batch")
        image = parse_int_list(args.image_shape)
        if len(image) != 3:
            raise CliError(f"--image-shape takes C,H,W, got {args.image_shape!r}")
        try:
            shape = image if args.layout == "NCHW" else (image[1], image[2], image[0])
            net, params, ishape, _ = graph.testing.get_network(args.network, args.batch,
                                                               args.layout, image_shape=shape)
        except graph.GraphError as exc:
            raise CliError(str(exc)) from None
        inputs = {"data": tuple(ishape)}
        label = f"{args.network}-{args.layout}-B{args.batch}-{'x'.join(map(str, image))}"
    if not (is_onnx and args.layout == "NHWC"):
        ref_net = net
    name = os.path.basename(args.network) if is_onnx else args.network
    suffix = ".json" if args.method == "auto_scheduler" else "-autotvm.log"
    default = os.path.join("logs", f"{label}{suffix}")
    log = os.fspath(check_log_path(args.log or default, create_parent=not args.log))
    if args.method == "autotvm":
        return _autotvm(args, net, params, inputs, log, name, ref_net)
    tasks, weights = auto_scheduler.extract_tasks(net, params, args.target)
    print(f"{name}: {len(tasks)} tasks; log: {log}")
    _print_tasks(tasks, weights)
    if args.trials > 0:
        from templtune.cli.report import write_task_table

        if args.trials < len(tasks):
            raise CliError(f"--trials {args.trials} is below the number of tasks ({len(tasks)}); "
                           "each task needs at least one measurement")
        write_task_table(log, [{"key": t.workload_key, "label": t.desc or t.workload_key,
                                "weight": float(w), "flop": float(t.compute_dag.flop_ct)}
                               for t, w in zip(tasks, weights)])
        progress = _NetworkProgress(args.trials, args.time_budget, not args.no_progress)
        sched = auto_scheduler.TaskScheduler(
            tasks, weights, load_log_file=log if os.path.isfile(log) else None,
            callbacks=[progress], seed=args.seed)
        opts = auto_scheduler.TuningOptions(
            num_measure_trials=args.trials, num_measures_per_round=args.per_round,
            runner=_runner(args, auto_scheduler, repeat=args.repeat,
                           min_repeat_ms=args.min_repeat_ms),
            measure_callbacks=[auto_scheduler.RecordToFile(log)], verbose=0)
        t0 = time.time()
        try:
            sched.tune(opts, search_policy="sketch.random" if args.model == "random"
                       else "default")
        finally:
            progress.close()
        print(f"tuned {sched.ct} trials in {time.time() - t0:.1f} s; estimated latency "
              + (f"{sched.cur_score * 1e3:.3f} ms" if sched.cur_score < 1e9 else "-"))
    t0 = time.time()
    if os.path.isfile(log):
        with auto_scheduler.ApplyHistoryBest(log):
            lib = graph.build(net, target=args.target, params=params)
    else:
        lib = graph.build(net, target=args.target, params=params)
    return _check_and_time(args, ref_net, params, inputs, lib, t0)


def _autotvm(args: argparse.Namespace, net: Function, params: dict,
             inputs: dict[str, tuple[int, ...]], log: str, name: str, ref_net: Function) -> int:
    from templtune import autotvm, graph
    from templtune.graph.transform import PassContext

    tasks = autotvm.task.extract_from_program(net, params, args.target)
    # NOTE: and the blocked convolutions' other implementations (Winograd), tuned last
    tasks += graph.blocked_alternatives(net, params, args.target)
    print(f"{name}: {len(tasks)} AutoTVM tasks; log: {log}")
    for i, t in enumerate(tasks):
        print(f"{i:>3}  {t.flop / 1e6:9.2f} MFLOP  {t.name}{tuple(t.args)}  "
              f"({len(t.config_space)} configs)")
    if args.trials_per_task > 0:
        from templtune.cli.report import write_task_table

        write_task_table(log, [{"key": f"{t.name}{tuple(t.args)}",
                                "label": f"{t.name}{tuple(t.args)}", "weight": 1.0,
                                "flop": float(t.flop)} for t in tasks])
        t0 = time.time()
        # NOTE: one builder pool and one measurement process for all tasks.
        option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                        runner=_runner(args, autotvm, repeat=args.repeat))
        seeds: dict[Any, list[Any]] = {}
        refs = autotvm.tophub.context(args.target)  # the packaged logs, read once
        try:
            for i, task in enumerate(tasks):
                left = None if args.time_budget is None else args.time_budget - (time.time() - t0)
                if left is not None and left <= 0:
                    print(f"time budget spent: tasks {i + 1}..{len(tasks)} not tuned")
                    break
                s = tune_task(task, tuner=args.tuner, n_trial=args.trials_per_task, log=log,
                              early_stopping=args.early_stopping, seed=args.seed,
                              progress=not args.no_progress, option=option, time_budget=left,
                              initial_configs=seeds.setdefault(
                                  task.workload, packaged_configs(task, refs)))
                print(f"[Task {i + 1:2d}/{len(tasks):2d}] {task.name}{tuple(task.args)}: "
                      f"{s.best_gflops:.2f} GFLOPS after {s.trials} trials")
        finally:
            for part in option.values():
                part.close()
        print(f"tuned {len(tasks)} tasks in {time.time() - t0:.1f} s")
        if args.remeasure_top > 0 and os.path.isfile(log):
            _remeasure(args, tasks, log, seeds)
    t0 = time.time()
    best = best_log_path(log)
    # NOTE: a re-measured file of an earlier run is stale once this run tuned without one
    fresh = os.path.isfile(best) and not (args.trials_per_task > 0 and args.remeasure_top == 0)
    # NOTE: opt_level 3, as the tasks were extracted: convolutions run their NCHW[x]c configs
    with PassContext(opt_level=3):
        if fresh or os.path.isfile(log):
            use = best if fresh else log
            print(f"building with the records of {use}")
            with autotvm.apply_history_best(use):
                lib = graph.build(net, target=args.target, params=params)
        else:  # the packaged reference logs and fallback configs
            lib = graph.build(net, target=args.target, params=params)
    return _check_and_time(args, ref_net, params, inputs, lib, t0)


def best_log_path(log: str) -> str:
    """Where ``tune-network --method autotvm`` writes the re-measured records of ``log``."""
    stem, ext = os.path.splitext(log)
    return f"{stem}.best{ext or '.log'}"


def same_blocking(seeds: dict[Any, list[Any]]) -> Any:
    """``keep(task, config)`` for :func:`remeasure_best`: where a task's packaged record
    (``seeds`` by task workload) fixes channel blocks (``tile_ic``/``tile_oc``), only configs
    with those blocks; any config elsewhere.

    Why: the packaged records give the network one blocking from layer to layer; configs
    timed alone at other blockings looked faster but made a slower network
    (``benchmarks/results/inference.txt``), so a tuning run refines each layer's kernel
    within the packaged layout instead of re-planning layouts from isolated timings."""
    from templtune.graph.alter_layout import config_blocks

    def blocks(cfg: Any) -> tuple[int, int] | None:
        ents = getattr(cfg, "_entity_map", {})
        return config_blocks(cfg) if "tile_ic" in ents and "tile_oc" in ents else None

    def keep(task: Any, cfg: Any) -> bool:
        seed = seeds.get(task.workload)
        want = blocks(seed[0]) if seed else None
        return want is None or blocks(cfg) == want

    return keep


def _remeasure(args: argparse.Namespace, tasks: list, log: str,
               seeds: dict[Any, list[Any]]) -> None:
    """Each task's fastest configs (at its packaged record's blocking, :func:`same_blocking`)
    measured again side by side into :func:`best_log_path`, which the build then uses.

    Every timed call starts from flushed caches (all arguments but the data): inside a
    network a layer meets its weights cold, and a kernel with large weights (Winograd's
    transformed ones) that wins on hot caches can lose there."""
    from templtune import autotvm
    from templtune.autotvm.tuner.remeasure import remeasure_best

    t0 = time.time()
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=_runner(args, autotvm, number=1, repeat=15,
                                                   min_repeat_ms=0, enable_cpu_cache_flush=True))
    try:
        n = remeasure_best(tasks, log, best_log_path(log), option, top=args.remeasure_top,
                           keep=same_blocking(seeds))
    finally:
        for part in option.values():
            part.close()
    print(f"re-measured {n} records (the {args.remeasure_top} fastest configs per task) in "
          f"{time.time() - t0:.1f} s: {best_log_path(log)}")


def packaged_configs(task: Any, refs: Any = None) -> list[Any]:
    """The config of the packaged reference record of ``task`` (none: no record, or reference
    logs disabled): measured first, so that tuning keeps it when nothing beats it here.
    ``refs``: the reference logs' context of the task's target, to load them once for many
    tasks (default: loaded here)."""
    from templtune.autotvm import env, tophub

    if not env.reference_logs_enabled():
        return []
    refs = refs if refs is not None else tophub.context(task.target)
    cands = refs.query_candidates(task.target, task.workload)
    return [cfg for cfg, _ in cands[:1]]


def _check_and_time(args: argparse.Namespace, net: Function, params: dict,
                    inputs: dict[str, tuple[int, ...]], lib: GraphExecutorFactoryModule, t0: float) -> int:
    import templtune
    from templtune import graph

    print(f"compiled {len(lib.groups)} groups ({lib.num_tuned} from tuning records) "
          f"in {time.time() - t0:.1f} s")
    dev = templtune.device(lib.target)
    module = graph.GraphModule(lib["default"](dev))
    rng = np.random.default_rng(args.seed)
    feeds = {k: rng.uniform(size=shape).astype("float32") for k, shape in inputs.items()}
    for k, value in feeds.items():
        module.set_input(k, value)
    module.run()
    expected = graph.evaluate(net, params, **feeds)  # the network as imported
    np.testing.assert_allclose(module.get_output(0).numpy(), expected, rtol=1e-3, atol=1e-5)
    print("check: the compiled network matches numpy")
    ftimer = module.module.time_evaluator("run", dev, repeat=args.timing_repeat,
                                          min_repeat_ms=args.timing_ms)
    res = np.array(ftimer().results) * 1e3
    print(f"Mean inference time (std dev): {res.mean():.2f} ms ({res.std():.2f} ms)"
          + ("" if "emulator" not in module.module.timing else f" [{module.module.timing}]"))
    return 0


@command("tune-network", help="extract, tune, compile and time a zoo network (auto_scheduler)")
def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("network", help="a zoo network (resnet-N, mobilenet, vgg-N, densenet-N, "
                        "squeezenet_v1.1, inception_v3) or an ONNX model file (MODEL.onnx)")
    parser.add_argument("--input-shape", action="append", default=None, metavar="NAME:D0,D1,...",
                        help="shape of an ONNX model's input (repeatable), e.g. "
                             "data:1,3,224,224; needed where the model's shape is dynamic")
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                        help="zoo networks are built in this layout; an ONNX (NCHW) model's "
                             "convolutions are converted to NHWC by ConvertLayout")
    parser.add_argument("--image-shape", default="3,224,224", help="C,H,W (default 3,224,224)")
    parser.add_argument("--target", default="llvm",
                        help="llvm (CPU, default) or cuda (an NVIDIA GPU; without one, the CPU "
                             "emulator runs the kernels and times them on the CPU)")
    parser.add_argument("--method", choices=("auto_scheduler", "autotvm"),
                        default="auto_scheduler",
                        help="template-free search (default) or the target's AutoTVM templates")
    parser.add_argument("--trials-per-task", type=int, default=0,
                        help="--method autotvm: trials per task (0: build with the log as is)")
    parser.add_argument("--tuner", choices=tuner_names(), default="xgb",
                        help="--method autotvm: the tuner (default xgb)")
    parser.add_argument("--early-stopping", type=positive_int, default=None)
    parser.add_argument("--remeasure-top", type=int, default=4, metavar="K",
                        help="--method autotvm: after tuning, measure each task's K fastest "
                             "configs again side by side into LOG.best.log, which the build "
                             "uses (default 4; 0: build from the tuning log)")
    parser.add_argument("--trials", type=int, default=0,
                        help="--method auto_scheduler: total trials over all tasks (0: "
                             "compile and time with the log as it is; ~800 per task converges)")
    parser.add_argument("--per-round", type=positive_int, default=64,
                        help="measurements per task per round (default 64)")
    parser.add_argument("--model", choices=("xgb", "random"), default="xgb",
                        help="cost model guiding the search (default xgb)")
    parser.add_argument("--log", default=None,
                        help="records log (default logs/NETWORK-LAYOUT-BATCH-SHAPE.json)")
    parser.add_argument("--repeat", type=positive_int, default=1,
                        help="measurement repeats per candidate")
    parser.add_argument("--min-repeat-ms", type=float, default=100)
    parser.add_argument("--timing-repeat", type=positive_int, default=3)
    parser.add_argument("--timing-ms", type=float, default=300,
                        help="min_repeat_ms of the final timing (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-budget", type=positive_float, default=None, metavar="SECONDS",
                        help="stop tuning after this many seconds (the running round finishes)")
    parser.add_argument("--rpc-key", default=None,
                        help="measure on the Ray nodes advertising this device key "
                             "(RPCRunner; needs the [distributed] extra)")
    parser.add_argument("--rpc-address", default=None, metavar="HOST:PORT",
                        help="Ray cluster of --rpc-key (ray://host:port or the GCS host:port; "
                             "default: join or start a local Ray instance)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=cmd_tune_network)
