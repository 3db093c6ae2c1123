"""Re-time the best few configs of raw tuning logs in interleaved rounds and put the winner of
each workload into the shipped reference log of the host's ISA family
(templates/logs/cpu/x86.log for AVX2, x86_avx512.log for AVX-512).

Why: on a shared 2-core machine one tuning measurement (number 3 x repeat 2) can be off by 2x,
so the best record of a raw log is often a lucky sample (measured: the stem's tuner pick,
``unroll_kw=False``, re-timed 1.4x slower than the same block with the loop unrolled). Here the
``--top`` distinct configs with the lowest mean cost are built once and timed round-robin
(``--rounds`` rounds of ``--number`` calls, 1 thread, glibc's allocator pinned as in the
runner); the median decides. The chosen record keeps its config and gets the medians of its
last rounds as costs. Other workloads' lines of the reference log are kept as they are.

Usage::

    python3 logs/rerank.py logs/pretune/conv2d_nchw_wvec_1_224_224_64_3_7_7_2_3.log [...]
        [--top 6] [--rounds 7] [--number 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import templtune
from templtune import autotvm
from templtune.autotvm.record import encode, load_from_file
from templtune.autotvm.task.reference import FAMILY_LOGS, IsaFamily, isa_family
from templtune.measure.measure import MeasureErrorNo, MeasureResult
from templtune.measure.worker import _pin_scratch_allocator

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "templates/logs/cpu" / FAMILY_LOGS[isa_family("llvm") or IsaFamily.AVX2]


def _key(inp: object) -> tuple[str, str]:
    return inp.task.name, repr(tuple(inp.task.args))


def rerank(path: str, top: int, rounds: int, number: int) -> dict[tuple[str, str], str]:
    """``{workload key: encoded winning record}`` for the workloads of one raw log."""
    groups: dict[tuple[str, str], dict[str, tuple[float, object]]] = {}
    for inp, res in load_from_file(path):
        if int(res.error_no) != 0 or not res.costs:
            continue
        cost = sum(res.costs) / len(res.costs)
        cfgs = groups.setdefault(_key(inp), {})
        ck = str(inp.config)
        if ck not in cfgs or cost < cfgs[ck][0]:
            cfgs[ck] = (cost, inp)
    out = {}
    rng = np.random.default_rng(0)
    for key, cfgs in groups.items():
        cands = [inp for _, inp in sorted(cfgs.values(), key=lambda t: t[0])[:top]]
        timers = []
        for inp in cands:
            with autotvm.ApplyConfig(inp.config), templtune.target.Target(str(inp.target)):
                s, bufs = inp.task.func(*inp.task.args)
            mod = templtune.build(s, bufs, target=str(inp.target))
            mod.set_num_threads(1)
            arrs = [rng.standard_normal([int(x) for x in b.shape]).astype(np.float32)
                    for b in bufs]
            mod(*arrs)
            ev = mod.time_evaluator(mod.entry_name, templtune.cpu(), number=number, repeat=1)
            timers.append((inp, ev, arrs))
        samples: list[list[float]] = [[] for _ in timers]
        for _ in range(rounds):
            for k, (_, ev, arrs) in enumerate(timers):
                samples[k].append(ev(*arrs).results[0])
        meds = [statistics.median(v) for v in samples]
        best = int(np.argmin(meds))
        for k, (inp, _, _) in enumerate(timers):
            print(f"{key[0]}{key[1]}: {meds[k] * 1e3:8.3f} ms  {inp.config}"
                  f"{'  <- best' if k == best else ''}")
        inp = timers[best][0]
        res = MeasureResult(tuple(sorted(samples[best])[:3]), MeasureErrorNo.NO_ERROR, 0.0,
                            time.time())
        out[key] = encode(inp, res)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=5)
    opts = ap.parse_args()
    from templtune.templates import load

    load("x86")
    _pin_scratch_allocator()
    winners: dict[tuple[str, str], str] = {}
    for path in opts.logs:
        winners.update(rerank(path, opts.top, opts.rounds, opts.number))
    lines = []
    for line in REF.read_text(encoding="utf-8").splitlines():
        recs = list(load_from_file_line(line))
        if recs and _key(recs[0][0]) in winners:
            continue
        lines.append(line)
    lines += [winners[k] for k in sorted(winners)]
    lines.sort(key=lambda ln: _key(load_from_file_line(ln)[0][0]))
    REF.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(winners)} re-ranked records into {REF}")
    return 0


def load_from_file_line(line: str) -> list:
    """The record of one log line (an empty list for a blank or unreadable line)."""
    from templtune.autotvm.record import decode

    rec = decode(line)
    return [rec] if rec is not None else []


if __name__ == "__main__":
    sys.exit(main())
