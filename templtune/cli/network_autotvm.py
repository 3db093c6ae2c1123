"""``tune-network --method autotvm``: tune the template tasks, re-measure, build with records."""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

from templtune.cli.network_measure import _check_and_time, _runner
from templtune.cli.tune_cmd import tune_task

if TYPE_CHECKING:
    from templtune.graph.ir import Function


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
