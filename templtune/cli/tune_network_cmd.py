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

from templtune.cli.main import CliError, command
from templtune.cli.network_autotvm import (  # noqa: F401  (re-exported: were defined here)
    _autotvm,
    _remeasure,
    best_log_path,
    packaged_configs,
    same_blocking,
)
from templtune.cli.network_measure import (  # noqa: F401  (re-exported: were defined here)
    _check_and_time,
    _rpc_address,
    _runner,
)
from templtune.cli.tune_cmd import (
    check_log_path,
    parse_int_list,
    positive_float,
    positive_int,
    tuner_names,
)

if TYPE_CHECKING:
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
