"""Distill the raw pre-tuning logs (logs/pretune/*.log) into the shipped reference log
templates/logs/cpu/x86.log: the best successful record of each workload."""

from __future__ import annotations

import glob
import sys
from pathlib import Path

from templtune.autotvm.record import encode, load_from_file

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    best: dict[tuple, tuple[float, object, object]] = {}
    for path in sorted(glob.glob(str(ROOT / "logs/pretune/*.log"))):
        for inp, res in load_from_file(path):
            if int(res.error_no) != 0 or not res.costs:
                continue
            cost = sum(res.costs) / len(res.costs)
            key = (inp.task.name, repr(inp.task.args))
            if key not in best or cost < best[key][0]:
                best[key] = (cost, inp, res)
    out = ROOT / "templates/logs/cpu/x86.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for _, inp, res in (best[k] for k in sorted(best)):
            f.write(encode(inp, res) + "\n")
    print(f"wrote {len(best)} records to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
