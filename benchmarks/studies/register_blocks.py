"""The inner loop LLVM emits for ``conv2d_NCHWc`` register blocks, for an AVX-512 and an AVX2
CPU: FMAs, accumulators, loads and stack accesses (spills) of each ``ow_bn`` pixels x ``vecs``
registers block, 1x1 and 3x3, kw taps not unrolled.

It shows which blocks fit the register file with their weight vectors and a broadcast
(``acc + vecs + 1`` registers where ``vecs > 1``; LLVM keeps the weights in registers): the
template computes the others in passes of fewer vectors (``register_vectors``), so their
loop holds one pass's FMAs and accumulators, and no block touches the stack. Compiles only
(no timing), so any host can run it::

    python3 benchmarks/studies/register_blocks.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import templtune  # noqa: E402
import templtune.templates.x86.conv2d_nchwc  # noqa: E402,F401 - registers the template
from templtune import autotvm  # noqa: E402
from templtune.autotvm.space import ConfigEntity  # noqa: E402
from templtune.codegen.llvm.asm_loops import hottest_loop  # noqa: E402
from templtune.target import Target, capabilities  # noqa: E402

CASES = {"llvm -mcpu=skylake-avx512": [(7, 4), (14, 2), (28, 1), (4, 4), (6, 4), (3, 8)],
         "llvm -mcpu=haswell": [(7, 2), (14, 1), (6, 2), (4, 2), (3, 4), (7, 1)]}


def main() -> None:
    print(f"{'target':28s} {'conv':4s} {'block':>9s} {'acc':>4s} {'regs':>5s} {'fmas':>5s} "
          f"{'accs':>5s} {'bcast':>6s} {'vload':>6s} {'stack':>6s}")
    for target, blocks in CASES.items():
        caps = capabilities(Target(target))
        lanes, file_regs = caps.lanes("float32"), caps.vector_registers
        for ow, vecs in blocks:
            for k in (1, 3):
                oc = vecs * lanes
                args = (1, 4, 2 * ow, 2 * oc, 256, k, k, 1, (k - 1) // 2)
                cfg = ConfigEntity.from_json_dict({"index": 0, "entity": [
                    ["tile_ic", "sp", [-1, 16]], ["tile_oc", "sp", [-1, oc]],
                    ["tile_ow", "sp", [-1, ow]], ["unroll_kw", "ot", False]]})
                t = Target(target)
                task = autotvm.task.create("conv2d_NCHWc", args, t)
                with t, autotvm.ApplyConfig(cfg):
                    s, ts = task.func(*args)
                loop = hottest_loop(templtune.build(s, ts, target=t).get_source("asm"))
                need = ow * vecs + (vecs + 1 if vecs > 1 else 1)
                print(f"{target:28s} {k}x{k}  {ow:3d} x {vecs:2d} {ow * vecs:4d} "
                      f"{need:2d}/{file_regs:2d} {loop.fmas:5d} {loop.accumulators:5d} "
                      f"{loop.broadcast_loads:6d} {loop.vector_loads:6d} "
                      f"{loop.stack_accesses:6d}")


if __name__ == "__main__":
    main()
