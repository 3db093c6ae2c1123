"""Per-loop-variable ("itervar") features of a lowered function.

For every loop variable, in first-occurrence (pre-order) order, the row is::

    log2(extent+1), nest_level, log2(topdown+1), log2(bottomup+1),
    11-way one-hot annotation (see ``loops.ANNOTATIONS``),
    log2(n_add+1), log2(n_mul+1), log2(n_div+1),
    then for every buffer access of the function, sorted by (buffer name, k):
    stride, mod, count, reuse, thread_count, thread_reuse   (each as sign(x)*log2(|x|+1))

so a row has ``ITERVAR_LOOP_WIDTH + 6 * n_accesses`` values and the whole vector
``n_loops * (18 + 6 * n_accesses)`` values (the tuner appends the config's knob features).

Definitions, for loop ``L`` and access ``b`` nested inside it (``inner`` = the loops from ``L``
down to ``b``, ``L`` included):

* ``stride``: the integer coefficient of ``L``'s variable in ``b``'s flat index (0 if absent or
  non-linear); ``mod`` is -1 (kept for layout compatibility, no modulo analysis);
* ``count``: product of the extents in ``inner`` whose variable appears in the index;
  ``reuse``: the product of the other extents in ``inner``;
* ``thread_count``/``thread_reuse``: the same over the loops of ``inner`` that are *not* spread
  over threads (parallel, blockIdx/threadIdx, vthread), i.e. the work of one thread;
* ``bottomup``: max over accesses inside ``L`` of ``count * reuse``;
* op counts: float add/sub, mul, div/mod executed during one full run of ``L`` (static count times
  the extents of the loops from ``L`` inwards, times vector lanes).

Deviations from TVM (deliberate): every loop row lists *all* accesses of the function (zeros for
accesses outside the loop) so that configs with the same loop structure give aligned, equal-length
vectors; TVM lists only the accesses inside each loop, which shifts positions between loops. The
op counts are executed counts, not static counts of the innermost loop.
"""

from __future__ import annotations

import math

import numpy as np

from templtune.autotvm.feature.loops import (
    ANNOTATIONS,
    PARALLEL_ANNOTATIONS,
    AccessInfo,
    LoopInfo,
    LoopSummary,
)

ITERVAR_LOOP_WIDTH = 18
ACCESS_WIDTH = 6
_ACCESS_FIELDS = ("stride", "mod", "count", "reuse", "thread_count", "thread_reuse")


def _log(x: float) -> float:
    return math.log2(x + 1.0)


def _slog(x: float) -> float:
    return math.copysign(math.log2(abs(x) + 1.0), x)


def sorted_accesses(summary: LoopSummary) -> list[AccessInfo]:
    """Accesses ordered by (buffer name, per-buffer visiting index)."""
    return sorted(summary.accesses, key=lambda a: (a.buffer, int(a.name.rsplit("_", 1)[1])))


def _position(chain: tuple[LoopInfo, ...], lp: LoopInfo) -> int | None:
    for i, x in enumerate(chain):
        if x is lp:
            return i
    return None


def touch_stats(acc: AccessInfo, inner: tuple[LoopInfo, ...]) -> tuple[int, int, int, int]:
    """(count, reuse, thread_count, thread_reuse) of ``acc`` over the loops ``inner``."""
    count = reuse = tcount = treuse = 1
    for lp in inner:
        present = lp.var in acc.vars
        if present:
            count *= lp.extent
        else:
            reuse *= lp.extent
        if lp.annotation not in PARALLEL_ANNOTATIONS:
            if present:
                tcount *= lp.extent
            else:
                treuse *= lp.extent
    return count, reuse, tcount, treuse


def itervar_rows(summary: LoopSummary) -> np.ndarray:
    """The feature matrix, one row per loop variable: shape ``(n_loops, 18 + 6*n_accesses)``."""
    accesses = sorted_accesses(summary)
    width = ITERVAR_LOOP_WIDTH + ACCESS_WIDTH * len(accesses)
    out = np.zeros((len(summary.loops), width), dtype=np.float32)
    for r, lp in enumerate(summary.loops):
        row = out[r]
        row[0] = _log(lp.extent)
        row[1] = lp.depth
        row[2] = _log(lp.topdown)
        row[4 + ANNOTATIONS.index(lp.annotation)] = 1.0
        ops = {"add": 0, "mul": 0, "div": 0}
        for op in summary.ops:
            p = _position(op.loops, lp)
            if p is not None:
                ops[op.kind] += op.lanes * math.prod(x.extent for x in op.loops[p:])
        row[15], row[16], row[17] = _log(ops["add"]), _log(ops["mul"]), _log(ops["div"])
        bottomup = 0
        for j, acc in enumerate(accesses):
            p = _position(acc.loops, lp)
            if p is None:
                continue
            count, reuse, tcount, treuse = touch_stats(acc, acc.loops[p:])
            bottomup = max(bottomup, count * reuse)
            base = ITERVAR_LOOP_WIDTH + ACCESS_WIDTH * j
            vals = (acc.strides.get(lp.var, 0), -1, count, reuse, tcount, treuse)
            for k, v in enumerate(vals):
                row[base + k] = _slog(v)
        row[3] = _log(bottomup)
    return out


def itervar_feature(summary: LoopSummary) -> np.ndarray:
    """The flat itervar feature vector (``itervar_rows`` flattened row by row)."""
    return itervar_rows(summary).reshape(-1)


def itervar_feature_names(summary: LoopSummary) -> list[str]:
    """Names of the values of :func:`itervar_feature`, e.g. ``"i.extent"``, ``"k.A_0.count"``
    (unique: a repeated loop name gets a ``#k`` suffix)."""
    accesses = sorted_accesses(summary)
    names: list[str] = []
    seen: dict[str, int] = {}
    for lp in summary.loops:
        # NOTE: loops of different stages may share a name; the k-th repeat gets "#k".
        k = seen.get(lp.var.name, 0)
        seen[lp.var.name] = k + 1
        v = lp.var.name if k == 0 else f"{lp.var.name}#{k}"
        names += [f"{v}.extent", f"{v}.nest_level", f"{v}.topdown", f"{v}.bottomup"]
        names += [f"{v}.ann.{a}" for a in ANNOTATIONS]
        names += [f"{v}.add_ct", f"{v}.mul_ct", f"{v}.div_ct"]
        for acc in accesses:
            names += [f"{v}.{acc.name}.{f}" for f in _ACCESS_FIELDS]
    return names
