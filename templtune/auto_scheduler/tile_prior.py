"""A CPU prior for the initial population: register-sized innermost tiles.

Ansor fills a sketch's tile sizes uniformly. On CPU the innermost spatial tile of a
multi-level-tiled stage is the block of accumulators the vectorized inner loop updates for every
reduction step; uniformly drawn tiles are mostly scalar-width or spilling blocks. This module
draws such blocks directly: the innermost iterator fills whole vectors, and the block needs
between 7 and the target's accumulator registers of vectors. In a share of the samples
(``params["cpu_middle_level_one"]``) the spatial level between the two reduction levels (the
middle ``S`` of ``SSRSRS``) is 1, so the block's accumulators stay in registers over the whole
reduction below the outer tiles (the GEBP micro-kernel shape); the others draw it uniformly,
which allows the other good shape: an output tile resident in L1 across the outer reduction
level, its blocks revisited per short inner reduction (the best NHWC conv2d states). The outer
tile lengths stay uniform, so the evolution still reaches the whole space.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from .loop_state import SPATIAL, State
from .steps_loop import SplitStep

# NOTE: the figures behind these constants are in benchmarks/results/auto_scheduler.txt
# (benchmarks/as_prior.py measures them).
#: fewest accumulator vectors a block should keep in flight: FMA latency x FMA pipes independent
#: chains keep the pipes busy (8 on Zen 3/4 and Skylake-class cores); one short of that admits a
#: 7-wide axis (the 7x7 maps of late CNN layers) as the rows of a block of 7 vectors.
MIN_BLOCK_VECTORS = 7
#: fewest steps of the innermost reduction level, the loop the register block is reused over
#: (its accumulators are loaded and stored once per pass of it).
MIN_INNER_REDUCTION = 8
#: default share of the prior's samples whose spatial level between the outer and the inner
#: reduction level is drawn as 1 (``params["cpu_middle_level_one"]``): that shape (GEBP) wins on
#: dense, but the best NHWC conv2d states keep a large middle level (the output row stays in L1
#: over the input channels); half keeps both shapes in the initial population.
MIDDLE_LEVEL_ONE_SHARE = 0.5


def cpu_vector(task: Any) -> tuple[int, int]:
    """``(float32 lanes per vector register, accumulator registers)`` of a CPU task's target,
    from its capability record: ``(16, 28)`` with AVX-512 (32 zmm registers, a few kept for
    operands), ``(8, 14)`` with AVX2 (16 ymm); the x86 templates' register filters use the
    same budget."""
    from templtune.target import capabilities

    caps = capabilities(task.target)
    return caps.lanes("float32"), caps.accumulator_registers


def register_block_ok(policy: Any, state: State) -> bool:
    """Whether every multi-level-tiled stage of a CPU state has a register-sized innermost tile.

    The innermost spatial tile (the iterators after the last reduction iterator) is the block
    of accumulators the vectorized inner loop updates for each reduction step. It fits when its
    innermost iterator fills whole vectors (a multiple of the lanes, or the whole axis when the
    axis is shorter) and it needs between ``MIN_BLOCK_VECTORS`` and the target's accumulator
    registers of vectors (fewer leave the FMA pipes idle, more spill).
    """
    lanes, regs = getattr(policy, "_vector", None) or cpu_vector(policy.task)
    for st in state.stages:
        levels = _innermost_levels(st.iters)
        if levels is None:
            continue
        iters, block = st.iters, levels[0]
        if not block or any(it.range is None for it in block):
            continue
        inner = block[-1]
        base = inner.name.rsplit(".", 1)[0]
        full = math.prod(it.range or 1 for it in iters if it.name.rsplit(".", 1)[0] == base)
        if inner.range % lanes and inner.range != full:
            return False
        vectors = math.prod(it.range for it in block[:-1]) * -(-inner.range // lanes)
        if not MIN_BLOCK_VECTORS <= vectors <= regs:
            return False
    return True


def _level(it: Any) -> str:
    """The tile level of a split iterator (``"2"`` for ``ff.2``)."""
    return it.name.rsplit(".", 1)[-1]


def _innermost_levels(iters: Any) -> tuple[list, list, list] | None:
    """``(innermost spatial tile, innermost reduction level, middle spatial level)`` iterators
    of a multi-level-tiled stage: the spatial iterators after its last reduction iterator, the
    reduction iterators of that last one's level, and the spatial iterators between the outer
    and that innermost reduction level (the middle ``S`` of ``SSRSRS``; empty with a single
    reduction level). None for a stage that is not tiled or has no reduction."""
    red = [i for i, it in enumerate(iters) if it.iter_kind == 1]
    if not red or not any(".0" in it.name for it in iters):
        return None
    level = _level(iters[red[-1]])
    inner = [i for i in red if _level(iters[i]) == level]
    outer = [i for i in red if i < inner[0]]
    middle = iters[outer[-1] + 1:inner[0]] if outer else []
    return ([it for it in iters[red[-1] + 1:] if it.iter_kind == SPATIAL],
            [iters[i] for i in inner], [it for it in middle if it.iter_kind == SPATIAL])


def _unfilled(steps: Any) -> list[int]:
    return [k for k, s in enumerate(steps)
            if isinstance(s, SplitStep) and any(x is None for x in s.lengths)]


def _block_plan(policy: Any, sketch: State) -> list[tuple[tuple[int, ...], tuple[int, ...],
                                                          tuple[tuple[int, int], ...]]] | None:
    """Per multi-level-tiled stage of ``sketch``: the indices of the unfilled split steps whose
    innermost lengths form the stage's innermost spatial tile, in loop order (the last one is
    the vectorized axis), those of its innermost reduction level, and ``(split step, length
    index)`` of its middle spatial level (see :func:`_innermost_levels`). None when a tile
    iterator cannot be traced to its split."""
    steps = list(sketch.transform_steps)
    origin: dict[tuple[str, str], int] = {}
    for k in _unfilled(steps):
        s = steps[k]
        stage = policy.dag.replay(steps[:k]).stages[s.stage_id]
        origin[(stage.op_name, stage.iters[s.iter_id].name)] = k
    plans = []
    for st in sketch.stages:
        levels = _innermost_levels(st.iters)
        if levels is None:
            continue
        block, inner_r, middle = levels
        ks: list[list[int]] = [[], []]
        for part, its in ((0, block), (1, inner_r)):
            for it in its:
                at = origin.get((st.op_name, it.name.rsplit(".", 1)[0]))
                if at is None or steps[at].extent is None:
                    return None
                ks[part].append(at)
        mids = []
        for it in middle:
            base, _, lvl = it.name.rpartition(".")
            mk = origin.get((st.op_name, base))
            if mk is not None and lvl.isdigit() and 1 <= int(lvl) <= len(steps[mk].lengths):
                mids.append((mk, int(lvl) - 1))
        if ks[0]:
            plans.append((tuple(ks[0]), tuple(ks[1]), tuple(mids)))
    return plans


def _divisors(e: int, maxi: int) -> list[int]:
    return [d for d in range(1, min(e, maxi) + 1) if e % d == 0]


def _pick_blocks(policy: Any, steps: list, plans: list, rng: np.random.Generator
                 ) -> dict[int, int] | None:
    """Innermost length per split step, uniformly among the admissible ones: per stage, a
    register-sized spatial block, and an innermost reduction level of at least
    ``MIN_INNER_REDUCTION`` steps (when the reduction is that long) over which the block's
    accumulators stay in registers."""
    lanes, regs = getattr(policy, "_vector", None) or cpu_vector(policy.task)
    maxi = policy.params["max_innermost_split_factor"]
    chosen: dict[int, int] = {}
    for ks, rks, _ in plans:
        exts = [int(steps[k].extent) for k in ks]
        divs = [_divisors(e, maxi) for e in exts]
        divs[-1] = [d for d in divs[-1] if d % lanes == 0 or d == exts[-1]]
        combos = [c for c in itertools.product(*divs)
                  if MIN_BLOCK_VECTORS <= math.prod(c[:-1]) * -(-c[-1] // lanes) <= regs
                  and all(chosen.get(k, d) == d for k, d in zip(ks, c))]
        if not combos:
            return None
        chosen.update(zip(ks, combos[int(rng.integers(len(combos)))]))
        if rks:
            rdivs = [_divisors(int(steps[k].extent), maxi) for k in rks]
            need = min(MIN_INNER_REDUCTION, math.prod(d[-1] for d in rdivs))
            rcombos = [c for c in itertools.product(*rdivs) if math.prod(c) >= need
                       and all(chosen.get(k, d) == d for k, d in zip(rks, c))]
            if rcombos:
                chosen.update(zip(rks, rcombos[int(rng.integers(len(rcombos)))]))
    return chosen


def sample_register_tiles(policy: Any, sketch: State, rng: np.random.Generator,
                          factorizations: Any) -> State | None:
    """``sketch`` with every unfilled split filled, the innermost spatial tile of each tiled
    stage register-sized (see :func:`register_block_ok`) and, with probability
    ``params["cpu_middle_level_one"]`` (CPU default :data:`MIDDLE_LEVEL_ONE_SHARE`), its middle
    spatial level 1 where the split allows; None when the sketch's tiles cannot be traced or no
    block is admissible (the caller falls back to uniform draws)."""
    plans_by_sketch = policy.__dict__.setdefault("_block_plans", {})
    key = id(sketch)
    if key not in plans_by_sketch:
        plans_by_sketch[key] = (sketch, _block_plan(policy, sketch))
    plans = plans_by_sketch[key][1]
    if not plans:
        return None
    steps = list(sketch.transform_steps)
    chosen = _pick_blocks(policy, steps, plans, rng)
    if chosen is None:
        return None
    ones: dict[int, list[int]] = {}
    share = float(policy.params.get("cpu_middle_level_one", MIDDLE_LEVEL_ONE_SHARE))
    if share > 0.0 and rng.random() < share:
        for _, _, mids in plans:
            for k, idx in mids:
                ones.setdefault(k, []).append(idx)
    maxi = policy.params["max_innermost_split_factor"]
    for k in _unfilled(steps):
        s = steps[k]
        if s.extent is None:
            return None
        cands = factorizations(int(s.extent), len(s.lengths), maxi)
        if k in chosen:
            cands = [c for c in cands if c[-1] == chosen[k]]
        if not cands:
            return None
        if k in ones:
            # a middle level of 1 where the block allows it; otherwise any middle level
            cands = [c for c in cands if all(c[i] == 1 for i in ones[k])] or cands
        pick = cands[int(rng.integers(len(cands)))]
        steps[k] = SplitStep(s.stage_id, s.iter_id, int(s.extent), tuple(pick), s.inner_to_outer)
    return policy.dag.replay(steps)
