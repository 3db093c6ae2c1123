"""Re-time the best few configs of raw tuning logs in interleaved rounds and put the winner of
each workload into the shipped reference log of the host's ISA family
(templates/logs/cpu/x86.log for AVX2, x86_avx512.log for AVX-512).

Why: on a shared 2-core machine one tuning measurement (number 3 x repeat 2) can be off by 2x,
so the best record of a raw log is often a lucky sample (measured: the stem's tuner pick,
``unroll_kw=False``, re-timed 1.4x slower than the same block with the loop unrolled). Here the
``--top`` distinct configs with the lowest mean cost are built once and timed round-robin
(``--rounds`` rounds of ``--number`` calls, 1 thread, in thread CPU time, glibc's allocator
pinned as in the runner); the median decides. The chosen record keeps its config, gets the
fastest three rounds as costs and names the thread count it was timed at. Other workloads'
lines of the reference log are kept as they are, as are the workload's records timed at
another thread count.

``--threads N``: the kernels run on N threads, timed by the wall clock. A build running on N
threads prefers records timed at N (see ``ApplyHistoryBest``), so records at 1 and at 2
threads of one workload can both ship: an implementation that wins on one thread can stall
on memory bandwidth at two.

``--block B`` (``conv2d_NCHWc`` and grouped workloads): the candidates are instead every point of the
task's space with channel blocks ``B`` in and out (any input block where ``B`` does not divide
the input channels, as the stem's 3), so that a network whose convs all take these records
keeps one layout from conv to conv and pays no layout transform between them; the raw log
then only names the workloads. ``--quantile`` picks the statistic of the rounds (0.5: the
median; a lower one discounts rounds slowed by other processes on a shared host).

``--together``: the candidates of all the given logs are timed in the same rounds (by
default each workload's in its own). The build runs whichever implementation of a layer has
the lowest recorded cost, so records of competing implementations (the direct conv and
Winograd of one layer) are only comparable when timed under the same load.

Usage::

    python3 logs/rerank.py logs/pretune/conv2d_nchw_wvec_1_224_224_64_3_7_7_2_3.log [...]
        [--top 6] [--rounds 7] [--number 5] [--block 32] [--quantile 0.5] [--together]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

# NOTE: run as a script, this folder (not the checkout) heads sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import templtune  # noqa: E402
from templtune import autotvm  # noqa: E402
from templtune.autotvm.record import encode, load_from_file  # noqa: E402
from templtune.autotvm.task.reference import FAMILY_LOGS, IsaFamily, isa_family  # noqa: E402
from templtune.measure.measure import MeasureErrorNo, MeasureResult  # noqa: E402
from templtune.measure.worker import _pin_scratch_allocator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "templates/logs/cpu" / FAMILY_LOGS[isa_family("llvm") or IsaFamily.AVX2]


def _key(inp: object) -> tuple[str, str]:
    return inp.task.name, repr(tuple(inp.task.args))


def _timer(mod: object, number: int, threads: int):
    """Seconds per call of ``mod`` over ``number`` calls: on one thread in this thread's CPU
    time (the kernel runs on the caller's thread, and CPU time leaves out the slices other
    processes of a shared host take, which wall-clock rounds count), else by the wall clock."""
    clock = time.thread_time if threads == 1 else time.perf_counter

    def ev(*arrs: np.ndarray) -> float:
        t0 = clock()
        for _ in range(number):
            mod(*arrs)
        return (clock() - t0) / number

    return ev


#: the templates whose configs choose the network's channel blocks (``--block`` re-ranks them)
BLOCKED = ("conv2d_NCHWc", "group_conv2d_NCHWc.x86")


def block_candidates(inp: object, block: int) -> list[object]:
    """Measure inputs of every point of ``inp``'s (grouped) ``conv2d_NCHWc`` space whose output block
    is ``block`` and whose input block is ``block`` too where ``block`` divides the input
    channels."""
    from templtune.autotvm.measure import MeasureInput

    # NOTE: a task read back from a log carries no space; instantiate it again
    task = autotvm.task.create(inp.task.name, inp.task.args, inp.target)
    ci = int(task.args[4])
    space = task.config_space
    out = []
    for i in range(space.range_length):
        if not space.is_index_valid(i):
            continue
        cfg = space.get(i)
        if cfg["tile_oc"].size[-1] == block and (
                cfg["tile_ic"].size[-1] == block or ci % block):
            out.append(MeasureInput(inp.target, task, cfg))
    return out


def candidates(path: str, top: int, block: int | None = None
               ) -> dict[tuple[str, str], list[object]]:
    """``{workload key: measure inputs to time}`` for the workloads of one raw log: the ``top``
    distinct configs of lowest mean cost, or (``block``) every ``conv2d_NCHWc`` space point
    with that channel block."""
    groups: dict[tuple[str, str], dict[str, tuple[float, object]]] = {}
    for inp, res in load_from_file(path):
        if int(res.error_no) != 0 or not res.costs:
            continue
        cost = sum(res.costs) / len(res.costs)
        cfgs = groups.setdefault(_key(inp), {})
        ck = str(inp.config)
        if ck not in cfgs or cost < cfgs[ck][0]:
            cfgs[ck] = (cost, inp)
    out: dict[tuple[str, str], list[object]] = {}
    for key, cfgs in groups.items():
        cands = [inp for _, inp in sorted(cfgs.values(), key=lambda t: t[0])[:top]]
        if block is not None and key[0] in BLOCKED:
            cands = block_candidates(cands[0], block)
            if not cands:
                raise SystemExit(f"{key[0]}{key[1]}: no config with {block}-channel blocks")
        out[key] = cands
    return out


def time_pool(pool: dict[tuple[str, str], list[object]], rounds: int, number: int,
              quantile: float = 0.5, threads: int = 1) -> dict[tuple[str, str], str]:
    """``{workload key: encoded winning record}``: every candidate of ``pool`` is built, then
    all are timed round-robin in the same rounds, so that the winners' costs of different
    workloads (implementations competing for one layer, as Winograd and the direct conv do)
    were measured under the same machine load and compare."""
    rng = np.random.default_rng(0)
    timers = []
    for key, cands in pool.items():
        for inp in cands:
            with autotvm.ApplyConfig(inp.config), templtune.target.Target(str(inp.target)):
                s, bufs = inp.task.func(*inp.task.args)
            mod = templtune.build(s, bufs, target=str(inp.target))
            mod.set_num_threads(threads)
            arrs = [rng.standard_normal([int(x) for x in b.shape]).astype(np.float32)
                    for b in bufs]
            mod(*arrs)
            timers.append((key, inp, _timer(mod, number, threads), arrs))
    samples: list[list[float]] = [[] for _ in timers]
    for _ in range(rounds):
        for k, (_, _, ev, arrs) in enumerate(timers):
            samples[k].append(ev(*arrs))
    stat = [float(np.quantile(v, quantile)) for v in samples]
    out = {}
    for key in pool:
        mine = [k for k, t in enumerate(timers) if t[0] == key]
        best = min(mine, key=lambda k: stat[k])
        for k in mine:
            print(f"{key[0]}{key[1]}: {stat[k] * 1e3:8.3f} ms  {timers[k][1].config}"
                  f"{'  <- best' if k == best else ''}")
        res = MeasureResult(tuple(sorted(samples[best])[:3]), MeasureErrorNo.NO_ERROR, 0.0,
                            time.time(), threads=threads)
        out[key] = encode(timers[best][1], res)
    return out


def rerank(path: str, top: int, rounds: int, number: int, block: int | None = None,
           quantile: float = 0.5, threads: int = 1) -> dict[tuple[str, str], str]:
    """``{workload key: encoded winning record}`` for the workloads of one raw log, each
    workload's candidates timed in their own rounds (see the module docstring for ``block``,
    ``quantile`` and ``threads``)."""
    out = {}
    for key, cands in candidates(path, top, block).items():
        out.update(time_pool({key: cands}, rounds, number, quantile, threads))
    return out


def _line_key(line: str) -> tuple[str, str, int] | None:
    """(task name, arguments, thread count) of a log line; None for an unreadable one. A
    record that names no count counts as a 1-thread one (the pipeline tunes on one thread)."""
    recs = load_from_file_line(line)
    if not recs:
        return None
    inp, res = recs[0]
    return (*_key(inp), int(res.threads) or 1)


def write_winners(winners: dict[tuple[str, str], str], ref: Path) -> None:
    """Put each winning record into the reference log ``ref``, in place of the workload's
    record timed at the same thread count."""
    # NOTE: a winner replaces its workload's line in place (new workloads go at the end), so
    # the diff of the shipped log names only the re-ranked workloads
    by_key = {_line_key(line): line for line in winners.values()}
    lines, placed = [], set()
    for line in ref.read_text(encoding="utf-8").splitlines():
        key = _line_key(line)
        if key in by_key:
            if key not in placed:
                lines.append(by_key[key])
                placed.add(key)
            continue
        lines.append(line)
    lines += [by_key[k] for k in sorted(by_key, key=str) if k not in placed]
    ref.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--block", type=int, default=None,
                    help="conv2d_NCHWc: time every space point with this channel block")
    ap.add_argument("--quantile", type=float, default=0.5, help="statistic of the rounds")
    ap.add_argument("--together", action="store_true",
                    help="time the candidates of all the logs in the same rounds")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads the kernels run on (above 1 timed by the wall clock)")
    ap.add_argument("--out", type=Path, default=REF,
                    help="the reference log to update (default: the host family's)")
    opts = ap.parse_args()
    from templtune.templates import load

    load("x86")
    _pin_scratch_allocator()
    winners: dict[tuple[str, str], str] = {}
    if opts.together:
        pool: dict[tuple[str, str], list[object]] = {}
        for path in opts.logs:
            pool.update(candidates(path, opts.top, opts.block))
        winners = time_pool(pool, opts.rounds, opts.number, opts.quantile, opts.threads)
    else:
        for path in opts.logs:
            winners.update(rerank(path, opts.top, opts.rounds, opts.number, opts.block,
                                  opts.quantile, opts.threads))
    write_winners(winners, opts.out)
    print(f"wrote {len(winners)} re-ranked records into {opts.out}")
    return 0


def load_from_file_line(line: str) -> list:
    """The record of one log line (an empty list for a blank or unreadable line)."""
    from templtune.autotvm.record import decode

    rec = decode(line)
    return [rec] if rec is not None else []


if __name__ == "__main__":
    sys.exit(main())
