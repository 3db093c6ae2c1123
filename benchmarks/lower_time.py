"""Lowering time (schedule -> loop IR), per part: bound inference, nest building, passes.

Schedules (built once, outside the timing):

* ``as-dense`` / ``as-conv``: ``--count`` auto-scheduler states of dense 1024^3 and of the
  seed conv2d+bias+relu, sampled as ``benchmarks/as_cost_model.py timing`` does
  (``SketchPolicy(task, RandomModel(seed)).sample_initial_population(n)``), replayed with
  ``apply_steps_from_state(state, layout_rewrite=task.layout_rewrite_option)``;
* ``tmpl-conv`` / ``tmpl-dense``: ``--count`` configs of the x86 ``conv2d_nchw`` and
  ``dense`` AutoTVM templates (seeded sample of the space);
* ``seed-conv``: the seed conv2d schedule of ``benchmarks/build_time.py``.

Each case is lowered in ``--rounds`` interleaved rounds; the figures are medians over the
rounds of the mean time per schedule (ms). The parts follow ``templtune.lower``:
``bound`` = :func:`infer_bound`, ``nest`` = :func:`build_nest`, ``passes`` = partition,
vectorize, unroll, ``PrimFunc`` and :func:`verify`. Run::

    python benchmarks/lower_time.py --count 60 --rounds 5
    python benchmarks/lower_time.py --dump /tmp/lowered.txt   # printed IR of every schedule

This is single-threaded Python time; run it when the machine is quiet (the output starts with
the load average).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import templtune
from templtune import auto_scheduler
from templtune.lower.ir import PrimFunc
from templtune.lower.nest import build_nest
from templtune.lower.partition import partition_loops
from templtune.lower.passes import unroll_loops
from templtune.lower.vectorize import vectorize_loops
from templtune.lower.verify import verify
from templtune.schedule.bound import infer_bound

Case = list[tuple[Any, list[Any]]]
PARTS = ("bound", "nest", "passes")


def _as_cases(count: int, seed: int) -> dict[str, Case]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from as_cost_model import _task
    from auto_scheduler import CONV, conv2d_bias_relu

    tasks = {"as-dense": _task(1024),
             "as-conv": auto_scheduler.SearchTask(func=conv2d_bias_relu, args=CONV,
                                                  target="llvm")}
    out = {}
    for name, task in tasks.items():
        pol = auto_scheduler.SketchPolicy(task, auto_scheduler.RandomModel(seed), seed=seed,
                                          verbose=0)
        states = pol.sample_initial_population(count)
        dag = task.compute_dag
        out[name] = [dag.apply_steps_from_state(s, layout_rewrite=task.layout_rewrite_option)
                     for s in states]
    return out


def _template_cases(count: int, seed: int) -> dict[str, Case]:
    import numpy as np

    from templtune import autotvm
    from templtune.templates import load

    load("x86")
    out = {}
    for name, tmpl, args in (("tmpl-conv", "conv2d_nchw", (1, 7, 7, 512, 512, 3, 3, 1, 1)),
                             ("tmpl-dense", "dense", (1024, 1024, 1024))):
        task = autotvm.task.create(tmpl, args, "llvm")
        space = task.config_space
        idx = space.sample_ints(min(count, len(space)), rng=np.random.default_rng(seed))
        out[name] = [task.instantiate(space.get(int(i))) for i in idx]
    return out


def _seed_case() -> dict[str, Case]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from build_time import conv2d_schedule

    return {"seed-conv": [conv2d_schedule()]}


def cases(count: int, seed: int = 0) -> dict[str, Case]:
    """Every benchmark case: name -> list of ``(schedule, args)``."""
    return {**_as_cases(count, seed), **_template_cases(count, seed), **_seed_case()}


def lower_parts(sch: Any, args: list[Any], clock: Callable[[], float] = time.perf_counter,
                ) -> tuple[PrimFunc, tuple[float, float, float]]:
    """``templtune.lower(sch, args)`` step by step; returns the function and the seconds
    spent in each part (:data:`PARTS`)."""
    t0 = clock()
    tensors = [sch.resolve(a) for a in args]
    br = infer_bound(sch)
    t1 = clock()
    params, body = build_nest(sch, tensors, br, [a.name for a in args])
    t2 = clock()
    body = partition_loops(body, br.var_ranges)
    body = vectorize_loops(body)
    body = unroll_loops(body, ranges=br.var_ranges)
    func = PrimFunc("main", tuple(params), body, (("global_symbol", "main"),
                                                   ("tir.noalias", True)))
    verify(func)
    t3 = clock()
    return func, (t1 - t0, t2 - t1, t3 - t2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process time (less disturbed by other processes on a loaded "
                    "machine)")
    ap.add_argument("--dump", metavar="FILE", help="write the printed IR of every schedule "
                    "(templtune.lower) to FILE and exit")
    a = ap.parse_args(argv)
    all_cases = cases(a.count, a.seed)
    if a.dump:
        with open(a.dump, "w") as f:
            for name, scheds in all_cases.items():
                for k, (sch, args) in enumerate(scheds):
                    f.write(f"### {name} {k}\n{templtune.lower(sch, args)}\n")
        print(f"wrote {sum(map(len, all_cases.values()))} functions to {a.dump}")
        return 0
    for name, scheds in all_cases.items():  # parts reproduce lower(), and a warm-up
        for sch, args in scheds:
            if str(lower_parts(sch, args)[0]) != str(templtune.lower(sch, args)):
                raise SystemExit(f"{name}: lower_parts differs from templtune.lower")
    print(f"load average {os.getloadavg()[0]:.2f}; medians of {a.rounds} interleaved rounds, "
          f"ms per schedule ({a.clock} clock)")
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    res: dict[str, list[list[float]]] = {n: [] for n in all_cases}
    for _ in range(a.rounds):
        for name, scheds in all_cases.items():
            tot = [0.0, 0.0, 0.0]
            for sch, args in scheds:
                _, parts = lower_parts(sch, args, clock)
                tot = [x + y for x, y in zip(tot, parts)]
            res[name].append([1e3 * x / len(scheds) for x in tot])
    print(f"{'case':<11} {'n':>3} {'bound':>8} {'nest':>8} {'passes':>8} {'lower':>8}")
    for name, rows in res.items():
        med = [statistics.median(r[i] for r in rows) for i in range(3)]
        total = statistics.median(sum(r) for r in rows)
        print(f"{name:<11} {len(all_cases[name]):>3} {med[0]:8.2f} {med[1]:8.2f} "
              f"{med[2]:8.2f} {total:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
