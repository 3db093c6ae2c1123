"""Regenerate the packaged reference log of the host's ISA family in one command.

The workloads are listed in ``logs/reference_workloads.txt`` (one ``template args`` line each;
``#`` starts a comment; read, refreshed and extracted by ``logs/reference_workloads.py``). The
pipeline

1. optionally adds to that file (``--refresh-workloads``) from the networks: every AutoTVM
   task that ``relay.build`` of resnet-18, resnet-50 and mobilenet (batch 1, NCHW, 224x224)
   would instantiate for each family's target (:data:`FAMILY_TARGETS`; the blocked layouts
   differ: 16 channels with AVX2, 32 with AVX-512), both with no tuning record (the
   strategies' fallback choice) and with the records of that family's packaged log (the
   implementations a log selects, e.g. Winograd), plus ``--all-candidates``: every registered
   implementation of every layer; a new line names its families after a ``;`` (a line with
   none is every family's); the benchmark workloads section (``# section: benchmarks``) is
   kept as it is;
2. tunes each workload of the family with XGB (``--trials`` per workload, at most an equal
   share of what is left of ``--time-budget``), one thread, appending to ``logs/pretune/<family>/<name>.log``
   (a rerun resumes: records already there count toward ``--trials``);
3. writes the best successful record of each workload to the family's packaged log
   (``templates/logs/cpu/x86.log`` for AVX2, ``x86_avx512.log`` for AVX-512; see
   :data:`templtune.autotvm.task.reference.FAMILY_LOGS`); with ``--only TEMPLATE`` only that
   template's records are replaced in place, every other line of the log is kept (and with
   ``--network NAME`` only the records of the workloads whose note names that network);
4. with ``--block [B]``, re-ranks every ``conv2d_NCHWc`` workload of the packaged log (and
   grouped one, ``group_conv2d_NCHWc.x86``) over the points of its space with ``B``-channel
   blocks in and out (default: the family's;
   ``logs/rerank.py --block``), so the network's convolutions keep one blocking and pay no
   layout transform between them;
5. with ``--threads N``, times every implementation of each blocked conv layer that has more
   than one (the direct kernel, Winograd F(2) and F(4)) together on N threads, and adds their
   N-thread records to the log where the N-thread winner is another implementation than the
   1-thread records pick (a build on N threads prefers N-thread records; where the choice
   does not change, the 1-thread ranking, less noisy, stays in charge of the configs).

The family is that of ``--target`` (default ``llvm``: the host), read from the Target's
capability record. A family that runs another's code (``IsaFamily.AVX512_256``: AVX-512 on
256-bit FMA units) shares that one's workloads; ``--seed-from FAMILY`` has each workload's
tuning measure the best ``--seed-top`` configs of that family's raw log first (configs only:
every cost in a family's raw logs is timed on a CPU of that family). Usage::

    python3 logs/reference_logs.py [--refresh-workloads] [--trials 16] [--time-budget 1500] \
        [--block] [--only depthwise_conv2d_NCHWc] [--network vit-b16]
    python3 logs/reference_logs.py --target "llvm -mcpu=haswell" ...   # the AVX2 log
    python3 logs/reference_logs.py --seed-from avx512 --trials 40 --block  # on a Zen 4
    python3 logs/reference_logs.py --keep --threads 2   # step 5 alone, on the shipped log
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# NOTE: the workload helpers (and rerank) live beside this script: its folder is on sys.path when
# it runs, not always when it is imported (the tests add it)
if str(ROOT / "logs") not in sys.path:
    sys.path.insert(1, str(ROOT / "logs"))
# NOTE: one thread: the 2 shared cores make 2-thread timings mostly noise; set before the
# measurement processes start (they inherit it).
os.environ.setdefault("TEMPLTUNE_NUM_THREADS", "1")

from reference_workloads import (  # noqa: E402
    BENCH_SECTION,
    FAMILY_TARGETS,
    NETWORKS,
    WORKLOADS,
    Workload,
    competing_layers,
    families_of,
    family_workloads,
    network_workloads,
    pipeline_block,
    read_workloads,
    refresh,
)

from templtune.autotvm.task.reference import FAMILY_LOGS, IsaFamily, isa_family  # noqa: E402

# NOTE: the workload names are re-exported: tests and older callers import them from here
__all__ = [
    "BENCH_SECTION", "FAMILY_TARGETS", "NETWORKS", "ROOT", "WORKLOADS", "Workload",
    "best_records", "competing_layers", "distill", "families_of", "family_workloads", "main",
    "merge", "multithread", "network_workloads", "pipeline_block", "read_workloads", "reblock",
    "refresh", "seed_configs", "tune_all",
]


def best_records(raw_dir: Path, workloads: list[Workload]) -> dict[tuple[str, tuple[int, ...]], str]:
    """``{(template, args): encoded record}``: the best successful record of each of
    ``workloads`` in the raw logs of ``raw_dir``."""
    from templtune.autotvm.record import encode, load_from_file

    wanted = {(w.template, w.args) for w in workloads}
    best: dict[tuple[str, tuple[int, ...]], tuple[float, str]] = {}
    for path in sorted(raw_dir.glob("*.log")):
        for inp, res in load_from_file(path):
            if int(res.error_no) != 0 or not res.costs:
                continue
            key = (inp.task.name, tuple(int(a) for a in inp.task.args))
            if key not in wanted:
                continue
            cost = sum(res.costs) / len(res.costs)
            if key not in best or cost < best[key][0]:
                best[key] = (cost, encode(inp, res))
    return {k: v[1] for k, v in best.items()}


def distill(raw_dir: Path, out: Path, workloads: list[Workload]) -> int:
    """Write the best successful record of each workload of ``raw_dir`` to ``out``; returns
    the number of records written."""
    best = best_records(raw_dir, workloads)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for key in sorted(best):
            f.write(best[key] + "\n")
    return len(best)


def select(workloads: list[Workload], template: str | None, network: str | None
           ) -> list[Workload]:
    """The workloads of ``template`` whose note names ``network`` (None: any)."""
    return [w for w in workloads if template in (None, w.template)
            and (network is None or network in w.note.partition(";")[0].split())]


def merge(raw_dir: Path, out: Path, workloads: list[Workload]) -> int:
    """Put the best record of each of ``workloads`` into ``out`` in place (a new workload at
    the end), leaving every other line as it is; returns the number of records put."""
    from rerank import write_winners

    best = best_records(raw_dir, workloads)
    write_winners({(k[0], repr(k[1])): v for k, v in best.items()}, out)
    return len(best)


def seed_configs(seed_dir: Path | None, w: Workload, top: int, space: Any) -> list[object]:
    """``space``'s points with the knob values of the ``top`` fastest successful records of
    ``w`` in ``seed_dir`` (another family's raw logs; a value the space no longer offers drops
    its record): a new family's tuning measures them first, so it starts from what won on the
    other CPU; only configs travel, every recorded cost is this host's."""
    from templtune.autotvm.record import load_from_file, usable_cost

    path = seed_dir / f"{w.stem}.log" if seed_dir is not None else None
    if path is None or top <= 0 or not path.exists():
        return []
    best: dict[int, tuple[float, Any]] = {}
    for inp, res in load_from_file(path):
        cost = usable_cost(res)
        if cost is None or tuple(inp.task.args) != w.args:
            continue
        point = space.point_of(inp.config)
        if point is not None and (point.index not in best or cost < best[point.index][0]):
            best[point.index] = (cost, point)
    return [cfg for _, cfg in sorted(best.values(), key=lambda cv: cv[0])[:top]]


def tune_all(workloads: list[Workload], target: str, raw_dir: Path, trials: int,
             budget: float, seed_dir: Path | None = None, seed_top: int = 0) -> None:
    """Tune every workload into ``raw_dir`` under one wall-time budget, each first measuring
    the best ``seed_top`` configs of ``seed_dir``'s log of it (:func:`seed_configs`)."""
    from templtune import autotvm
    from templtune.cli.tune_cmd import create_task, tune_task

    raw_dir.mkdir(parents=True, exist_ok=True)
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=3, repeat=2))
    t0 = time.time()
    try:
        for i, w in enumerate(workloads):
            left = budget - (time.time() - t0)
            if left <= 0:
                print(f"time budget spent: workloads {i + 1}..{len(workloads)} not tuned")
                break
            share = left / (len(workloads) - i)
            task = create_task(w.template, w.args, target)
            s = tune_task(task, tuner="xgb", n_trial=trials, log=raw_dir / f"{w.stem}.log",
                          early_stopping=None, seed=0, progress=False, option=option,
                          resume=True, time_budget=share,
                          initial_configs=seed_configs(seed_dir, w, seed_top,
                                                       task.config_space))
            print(f"[{i + 1:3d}/{len(workloads)}] {w.template}{w.args}: {s.best_gflops:7.2f} "
                  f"GFLOPS, {s.trials} trials (+{s.resumed} resumed) in {s.wall_s:.0f} s",
                  flush=True)
    finally:
        for part in option.values():
            part.close()
    print(f"tuned in {time.time() - t0:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm", help="its ISA family picks the output log")
    ap.add_argument("--refresh-workloads", action="store_true")
    ap.add_argument("--all-candidates", action="store_true",
                    help="with --refresh-workloads: every implementation of every layer")
    ap.add_argument("--trials", type=int, default=16, help="trials per workload")
    ap.add_argument("--time-budget", type=float, default=1500.0, help="seconds in all")
    ap.add_argument("--only", default=None, help="tune only workloads of this template")
    ap.add_argument("--network", default=None,
                    help="tune only workloads whose note names this network (e.g. vit-b16)")
    ap.add_argument("--no-tune", action="store_true", help="only distill the raw logs")
    ap.add_argument("--seed-from", default=None, choices=[f.value for f in IsaFamily],
                    help="measure the best configs of this family's raw logs first")
    ap.add_argument("--seed-top", type=int, default=8, help="configs per workload to seed")
    ap.add_argument("--block", type=int, nargs="?", const=0, default=None,
                    help="re-rank conv2d_NCHWc workloads with this channel block (step 4; "
                         "no value: the family's, 16 with AVX2, 32 with AVX-512)")
    ap.add_argument("--threads", type=int, default=None,
                    help="step 5: add records timed on this many threads where they change "
                         "a layer's implementation")
    ap.add_argument("--keep", action="store_true",
                    help="skip steps 2-4: keep the family log's records as they are")
    a = ap.parse_args(argv)

    family = isa_family(a.target)
    if family is None:
        known = ", ".join(f.value for f in IsaFamily)
        raise SystemExit(f"target {a.target!r} is in no ISA family ({known})")
    workloads = refresh(a.all_candidates) if a.refresh_workloads else read_workloads()
    workloads = [w for w in workloads if family.value in families_of(w)]
    seed_dir = ROOT / "logs" / "pretune" / a.seed_from if a.seed_from else None
    workloads = select(workloads, a.only, a.network)
    raw_dir = ROOT / "logs" / "pretune" / family.value
    out = ROOT / "templates" / "logs" / "cpu" / FAMILY_LOGS[family]
    print(f"{family.value}: {len(workloads)} workloads, raw logs {raw_dir}, output {out}")
    if a.keep:
        if a.threads:
            multithread(raw_dir, out, a.target, a.threads)
        return 0
    if not a.no_tune:
        tune_all(workloads, a.target, raw_dir, a.trials, a.time_budget, seed_dir, a.seed_top)
    if (a.only or a.network) and out.exists():
        # NOTE: only the selected workloads' records change: the others (re-ranked ones
        # among them) stay as shipped
        n = merge(raw_dir, out, workloads)
        print(f"put {n} {a.only or a.network} records into {out}")
    else:
        n = distill(raw_dir, out, workloads)
        print(f"wrote {n} records to {out}")
    if a.block is not None:
        block = a.block or pipeline_block(a.target)
        from rerank import BLOCKED

        reblock(raw_dir, out, [w for w in workloads if w.template in BLOCKED], block)
    if a.threads:
        multithread(raw_dir, out, a.target, a.threads)
    return 0


def multithread(raw_dir: Path, out: Path, target: str, threads: int) -> None:
    """Step 5 (see the module doc): N-thread records of the layers whose implementation
    changes at N threads."""
    from rerank import candidates, time_pool, write_winners

    from templtune.autotvm.record import decode, load_from_file
    from templtune.measure.worker import _pin_scratch_allocator

    _pin_scratch_allocator()
    shipped = {(inp.task.name, tuple(int(a) for a in inp.task.args)): float(min(res.costs))
               for inp, res in load_from_file(out) if int(res.threads) in (0, 1)}
    block = pipeline_block(target)
    added: dict[tuple[str, str], str] = {}
    for layer in competing_layers(target):
        raws = [raw_dir / f"{Workload(t, a).stem}.log" for t, a in layer]
        if not all(r.exists() for r in raws) or not all(k in shipped for k in layer):
            continue
        pool: dict[tuple[str, str], list[object]] = {}
        for raw in raws:
            pool.update(candidates(str(raw), 6, block))
        winners = time_pool(pool, rounds=9, number=5, threads=threads)
        cost = {k: min(decode(v)[1].costs) for k, v in winners.items()}
        fast_n = min(cost, key=cost.__getitem__)
        fast_1 = min(layer, key=shipped.__getitem__)
        fast_1 = (fast_1[0], repr(fast_1[1]))  # as rerank keys a workload
        print(f"{layer[0][1]}: {''.join(fast_1)} on 1 thread, {''.join(fast_n)} on {threads}")
        if fast_n != fast_1:
            added.update(winners)
    write_winners(added, out)
    print(f"added {len(added)} records timed on {threads} threads")


def reblock(raw_dir: Path, out: Path, workloads: list[Workload], block: int) -> None:
    """Step 4: the (grouped) ``conv2d_NCHWc`` records of ``out`` re-ranked with ``block``-channel
    blocks (each raw log names its workload; see ``logs/rerank.py``)."""
    from rerank import rerank, write_winners

    from templtune.measure.worker import _pin_scratch_allocator
    from templtune.templates import load

    load("x86")
    _pin_scratch_allocator()
    winners: dict[tuple[str, str], str] = {}
    for w in workloads:
        raw = raw_dir / f"{w.stem}.log"
        if raw.exists():
            winners.update(rerank(str(raw), top=1, rounds=7, number=5, block=block))
    write_winners(winners, out)
    print(f"re-ranked {len(winners)} records with {block}-channel blocks")


if __name__ == "__main__":
    sys.exit(main())
