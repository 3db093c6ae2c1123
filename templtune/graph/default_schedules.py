"""The schedule of a fused group that has neither a tuning record nor a template.

Pooling, softmax, element-wise and layout-transform groups (and any anchor a template cannot
run) get it: padding read by a long reduction is materialised, other injective producers are
inlined (a pooling window's padding test then runs lane-wise, as masked loads), except one
read by several stages, one of them a reduction (softmax's ``exp``, which would otherwise be
computed once per reader); the leading spatial loops are fused and parallel,
and the innermost non-unit spatial loop is split by the target's vector lanes and vectorized
(when the lanes, or a power-of-two fraction of them of at least ``_MIN_LANES``, divide it: a
guarded tail would stay serial). A long single-axis reduction (softmax's max and sum over the
last axis) is factored (``rfactor``) into lane-wide partial results. An NCHW <-> NCHW[x]c
layout transform runs by rows instead (:mod:`.default_relayout`). A row-wise group
(softmax, layer norm: reductions over the output's trailing axes and element-wise steps
between them) computes every stage inside the output's parallel loop over rows, so a row's
intermediates stay in cache instead of making whole-tensor passes over memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from templtune import te
from templtune.target import Target
from templtune.te.expr import Reduce
from templtune.te.tensor import ComputeOp

from .default_relayout import schedule_relayout

__all__ = ["default_schedule", "register_default_schedule"]

_PARALLEL_MIN = 64  # fuse leading loops until this many parallel iterations (or all but one)
_MATERIALISE_MIN = 64  # reductions at least this long get their padded input as a real buffer
_PARALLEL_WORK = 1 << 15  # fewer output elements x reduction steps run on one thread
_UNROLL_MAX = 16  # reduction windows up to this long are unrolled
_ROW_BLOCK_MAX = 8  # outputs per register block of a short-window reduction
_MIN_LANES = 4  # narrower vectors are not worth the split
_RFACTOR_MIN = 64  # single-axis reductions at least this long are factored (rfactor)


def _extent(iv: Any) -> int:
    return int(iv.dom.extent.value)


def _reduce_extent(op: ComputeOp) -> int:
    n = 1
    for r in op.reduce_axis:
        n *= _extent(r)
    return n


def _is_reduce(op: Any) -> bool:
    return isinstance(op, ComputeOp) and isinstance(op.body[0], Reduce)


def _lanes(caps: Any, dtype: str, extent: int, tail: bool = False) -> int:
    """The widest vector of at most the register's lanes that divides ``extent``; with
    ``tail``, a full register where none divides and ``extent`` holds more than one (lowering
    peels the partial last vector); 0: none."""
    try:
        full = caps.lanes(dtype)
    except ValueError:
        return 0
    n = full
    while n >= _MIN_LANES:
        if extent % n == 0:
            return n
        n //= 2
    return full if tail and extent > full >= _MIN_LANES else 0


def _vector_axis(axes: list[Any]) -> int | None:
    """Position of the innermost spatial axis longer than one (unit axes after it leave the
    access pattern unchanged), or None."""
    for k in range(len(axes) - 1, -1, -1):
        if _extent(axes[k]) > 1:
            return k
    return None


def _readers(s: Any) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for st in s.stages:
        if isinstance(st.op, ComputeOp):
            for t in st.op.input_tensors:
                out.setdefault(id(t.op), []).append(st.op)
    return out


def _inline(s: Any, out: te.Tensor) -> None:
    readers = _readers(s)
    for stage in s.stages:
        op = stage.op
        if not isinstance(op, ComputeOp) or op is out.op or _is_reduce(op):
            continue
        users = readers.get(id(op), [])
        # NOTE: padding read by a long reduction stays a stage of its own: inlined, its bounds
        # test sits in the innermost loop of a convolution; a pooling window is short and
        # inlining saves the extra pass.
        if any(_is_reduce(u) and _reduce_extent(u) >= _MATERIALISE_MIN for u in users):
            continue
        if len(users) > 1 and any(_is_reduce(u) for u in users):
            continue
        stage.compute_inline()


def _work(op: ComputeOp) -> int:
    n = _reduce_extent(op)
    for a in op.axis:
        n *= _extent(a)
    return n


def _parallel(stage: Any, axes: list[Any], limit: int, threshold: int) -> None:
    """Fuse ``axes[:n]`` (n <= limit) until ``threshold`` iterations, and parallelise them
    (not for work too small to pay for waking the threads)."""
    if _work(stage.op) < _PARALLEL_WORK:
        return
    n, extent = 0, 1
    while n < limit and extent < threshold:
        extent *= _extent(axes[n])
        n += 1
    if n == 0:
        return
    fused = stage.fuse(*axes[:n]) if n > 1 else axes[0]
    stage.parallel(fused)


def _factor(s: Any, stage: Any, caps: Any, threshold: int,
            attach: tuple[Any, Any] | None = None) -> Any | None:
    """rfactor a long single-axis reduction into lane-wide partials; returns the rf stage
    (computed at ``attach``, a ``(stage, loop)``, when given, else parallel at the root)."""
    op = stage.op
    if len(op.reduce_axis) != 1 or _reduce_extent(op) < _RFACTOR_MIN:
        return None
    # NOTE: float max is exact in any order; a float sum is reassociated, as TVM's rfactor
    # schedules (and numpy's pairwise sum) do.
    n = _reduce_extent(op)
    v = _lanes(caps, op.output(0).dtype, n, tail=True)
    if not v:
        return None
    # several registers of partials where they divide the row: independent add chains
    v *= next((m for m in (4, 2) if n % (v * m) == 0 and n >= 2 * v * m), 1)
    ko, ki = stage.split(op.reduce_axis[0], factor=v)
    rf = s.rfactor(op.output(0), ki, factor_axis=len(op.axis))
    # the v partials combine in a tree, not in a chain of v dependent adds
    main = s[op.output(0)]
    main.vectorize_reduction(main.op.reduce_axis[0])
    rst = s[rf]
    raxes = list(rst.leaf_iter_vars[:len(rst.op.axis)])
    rst.reorder(*raxes[:-1], *rst.op.reduce_axis, raxes[-1])
    rst.vectorize(raxes[-1])
    if attach is not None:
        rst.compute_at(*attach)
    elif len(raxes) > 1:
        _parallel(rst, raxes, len(raxes) - 1, threshold)
    return rst


def _divisor_block(n: int) -> int | None:
    """The largest divisor of ``n`` in 2.._ROW_BLOCK_MAX (a block with no tail), or None."""
    return next((f for f in range(min(n, _ROW_BLOCK_MAX), 1, -1) if n % f == 0), None)


def _row_block(axes: list[Any], k: int) -> int | None:
    """The register block over the spatial axis outside the vector axis ``k``, or None."""
    return _divisor_block(_extent(axes[k - 1])) if k >= 1 else None


def _chain_block(stage: Any, axes: list[Any], k: int, vo: Any, v: int
                 ) -> tuple[list[Any], list[Any]]:
    """``(outer, inner)`` loops of a long reduction into vectors of ``v`` lanes over
    ``axes[k]`` (split into ``vo`` x ``v``): ``inner`` (inside the reduction) holds a block of
    independent accumulators, neighbouring vectors of ``axes[k]`` where ``v`` divides it and
    it holds several, else a block of the nearest longer outer axis; empty where neither has a
    divisor up to ``_ROW_BLOCK_MAX``.

    One vector accumulating a whole 28x28 plane (global pooling) is a chain of 784 dependent
    adds, bound by the add latency; a block of independent ones keeps the adders busy and
    reads several neighbouring streams at once."""
    n = _extent(axes[k])
    if n % v == 0 and (b := _divisor_block(n // v)) is not None:
        vo_o, vo_i = stage.split(vo, factor=b)
        return axes[:k] + [vo_o], [vo_i]
    j = next((i for i in range(k - 1, -1, -1) if _extent(axes[i]) > 1), None)
    if j is None or (b := _divisor_block(_extent(axes[j]))) is None:
        return axes[:k] + [vo], []
    jo, ji = stage.split(axes[j], factor=b)
    return axes[:j] + [jo] + axes[j + 1:k] + [vo], [ji]


def _schedule_stage(s: Any, stage: Any, caps: Any, threshold: int) -> None:
    op = stage.op
    axes = list(stage.leaf_iter_vars[:len(op.axis)])
    if not axes:
        return
    reduce = _is_reduce(op)
    if reduce and _factor(s, stage, caps, threshold) is not None:
        return
    k = _vector_axis(axes)
    # NOTE: a short window's unrolled taps would each carry the tail's guard: no tail there
    window = reduce and _reduce_extent(op) <= _UNROLL_MAX
    v = _lanes(caps, op.output(0).dtype, _extent(axes[k]), tail=not window) if k is not None else 0
    if v and k is not None:
        vo, vi = stage.split(axes[k], factor=v)
        outer = axes[:k] + [vo]
        # NOTE: the vector of independent outputs goes inside the reduction (and the unit
        # axes), so its accumulators stay in registers and no reassociation is needed.
        red = list(op.reduce_axis) if reduce else []
        block = _row_block(axes, k) if window else None
        inner: list[Any] = []
        if block is not None:
            # NOTE: a short window (depthwise conv, pooling) chains one op per tap into each
            # accumulator; a block of neighbouring outputs inside the window gives the FMA
            # pipes independent chains instead of one latency-bound chain per vector.
            xo, xi = stage.split(axes[k - 1], factor=block)
            outer = axes[:k - 1] + [xo, vo]
            inner = [xi]
        elif reduce and not window:
            outer, inner = _chain_block(stage, axes, k, vo, v)
        stage.reorder(*outer, *axes[k + 1:], *red, *inner, vi)
        stage.vectorize(vi)
        if window:
            for r in red:  # a short window: one straight run of vector ops
                stage.unroll(r)
        for x in inner:
            stage.unroll(x)
        _parallel(stage, outer, len(outer), threshold)
        return
    if reduce and len(axes) > 1:
        # NOTE: the innermost spatial loop goes inside the reduction, so the inner loop
        # updates independent outputs and LLVM can vectorise it (no reassociation needed).
        stage.reorder(*axes[:-1], *op.reduce_axis, axes[-1])
    _parallel(stage, axes, len(axes) - 1, threshold)


def _shape(op: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in op.output(0).shape)


def _row_rank(stages: list[Any], out: te.Tensor) -> int:
    """``m`` when the group is row-wise: every stage besides the element-wise output is a
    reduction over the output's axes after the first ``m`` (shape ``out.shape[:m]``, or with
    kept unit axes) or element-wise over the output's shape (softmax, layer norm); else 0."""
    shape = _shape(out.op)
    if _is_reduce(out.op) or not stages:
        return 0
    ranks = set()
    for st in stages:
        sh = _shape(st.op)
        if not _is_reduce(st.op):
            if sh != shape:
                return 0
            continue
        m = len(sh)
        if m > len(shape):
            return 0
        while m and sh[m - 1] == 1 and shape[m - 1] != 1:
            m -= 1  # kept (unit) reduced axes
        if sh[:m] != shape[:m] or any(d != 1 for d in sh[m:]) or m >= len(shape):
            return 0
        ranks.add(m)
    return ranks.pop() if len(ranks) == 1 else 0


def _schedule_rows(s: Any, out: te.Tensor, stages: list[Any], m: int, caps: Any,
                   threshold: int) -> None:
    """Compute every stage of a row-wise group at the output's row loop: a row's reductions
    and intermediates stay in cache (at the root each would be a pass over memory)."""
    st = s[out]
    axes = list(st.op.axis)
    row = st.fuse(*axes[:m]) if m > 1 else axes[0]
    v = _lanes(caps, out.dtype, _extent(axes[-1]), tail=True)
    if v:
        st.vectorize(st.split(axes[-1], factor=v)[1])
    if _work(st.op) >= _PARALLEL_WORK:
        st.parallel(row)
    for stage in stages:
        stage.compute_at(st, row)
        if _is_reduce(stage.op):
            if _factor(s, stage, caps, threshold, attach=(st, row)) is None and \
                    len(stage.op.axis) > m:  # kept unit axes: the reduction goes outside
                stage.reorder(*stage.op.reduce_axis, *stage.op.axis[m:])
            continue
        inner = list(stage.leaf_iter_vars)[m:]
        w = _lanes(caps, stage.op.output(0).dtype, _extent(inner[-1]), tail=True)
        if w:
            stage.vectorize(stage.split(inner[-1], factor=w)[1])


DefaultSchedule = Callable[[list[te.Tensor], Target], Any]
#: target key (``"cpu"``, ``"gpu"``) -> the default schedule of groups on such targets
_BY_KEY: dict[str, DefaultSchedule] = {}


def register_default_schedule(key: str) -> Callable[[DefaultSchedule], DefaultSchedule]:
    """Register the default schedule of targets with key ``key`` (a decorator)."""
    def deco(fn: DefaultSchedule) -> DefaultSchedule:
        _BY_KEY[key] = fn
        return fn
    return deco


def default_schedule(tensors: list[te.Tensor], target: Target | None = None) -> Any:
    """The default schedule of a group's computation for ``target`` (default ``llvm``): the
    one registered for the first of the target's keys that has one.

    Parameters
    ----------
    tensors : list of Tensor
        The group's inputs then its output (the output last).
    target : Target, optional
        The target whose keys pick the schedule.

    Returns
    -------
    Schedule

    Raises
    ------
    GraphError
        No default schedule is registered for the target's keys.
    """
    tgt = target or Target("llvm")
    for key in tgt.capabilities.keys:
        fn = _BY_KEY.get(key)
        if fn is not None:
            return fn(tensors, tgt)
    from .op import GraphError

    raise GraphError(f"no default schedule is registered for target {tgt} (keys "
                     f"{tgt.capabilities.keys}; registered: {sorted(_BY_KEY)})")


@register_default_schedule("cpu")
def default_schedule_cpu(tensors: list[te.Tensor], target: Target | None = None) -> Any:
    """Schedule of a group's computation for a CPU target.

    Parameters
    ----------
    tensors : list of Tensor
        The group's inputs then its output (the output last).
    target : Target, optional
        Gives the vector lanes and the core count; default ``llvm`` (the host).

    Returns
    -------
    Schedule
    """
    caps = (target or Target("llvm")).capabilities
    out = tensors[-1]
    s = te.create_schedule(out.op)
    _inline(s, out)
    threshold = max(_PARALLEL_MIN, 4 * caps.cores)
    outer = schedule_relayout(s, out, caps)
    if outer is not None:
        _parallel(s[out], outer, len(outer), threshold)
        return s
    stages = [st for st in s.stages if isinstance(st.op, ComputeOp) and st.op is not out.op
              and st.attach_type != "inline"]
    m = _row_rank(stages, out)
    # NOTE: too few rows to share among the threads keep the per-stage schedule below (its
    # stages parallel over their own loops); a single thread takes the rows either way.
    rows: int = math.prod(list(_shape(out.op)[:m])) if m else 0
    if m and (rows >= threshold or _work(s[out].op) < _PARALLEL_WORK):
        _schedule_rows(s, out, stages, m, caps, threshold)
        return s
    # NOTE: the stages as listed before any rfactor (its .rf stages are scheduled by _factor)
    for stage in (*stages, s[out]):
        if isinstance(stage.op, ComputeOp):
            _schedule_stage(s, stage, caps, threshold)
    return s


# NOTE: imported for its registration (key "gpu"); it needs the registry above.
from . import default_schedules_gpu  # noqa: E402,F401
