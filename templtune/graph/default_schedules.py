"""The schedule of a fused group that has neither a tuning record nor a template.

Pooling, softmax, element-wise and layout-transform groups (and any anchor a template cannot
run) get it: padding read by a long reduction is materialised, other injective producers are
inlined (a pooling window's padding test then runs lane-wise, as masked loads), except one
read by several stages, one of them a reduction (softmax's ``exp``, which would otherwise be
computed once per reader); the leading spatial loops are fused and parallel,
and the innermost non-unit spatial loop is split by the target's vector lanes and vectorized
(when the lanes, or a power-of-two fraction of them of at least ``_MIN_LANES``, divide it: a
guarded tail would stay serial). A long single-axis reduction (softmax's max and sum over the
last axis) is factored (``rfactor``) into lane-wide partial results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from templtune import te
from templtune.target import Target
from templtune.te.expr import Reduce
from templtune.te.tensor import ComputeOp

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


def _factor(s: Any, stage: Any, caps: Any, threshold: int) -> Any | None:
    """rfactor a long single-axis reduction into lane-wide partials; returns the rf stage."""
    op = stage.op
    if len(op.reduce_axis) != 1 or _reduce_extent(op) < _RFACTOR_MIN:
        return None
    # NOTE: float max is exact in any order; a float sum is reassociated, as TVM's rfactor
    # schedules (and numpy's pairwise sum) do.
    v = _lanes(caps, op.output(0).dtype, _reduce_extent(op), tail=True)
    if not v:
        return None
    ko, ki = stage.split(op.reduce_axis[0], factor=v)
    rf = s.rfactor(op.output(0), ki, factor_axis=len(op.axis))
    rst = s[rf]
    raxes = list(rst.leaf_iter_vars[:len(rst.op.axis)])
    rst.reorder(*raxes[:-1], *rst.op.reduce_axis, raxes[-1])
    rst.vectorize(raxes[-1])
    if len(raxes) > 1:
        _parallel(rst, raxes, len(raxes) - 1, threshold)
    return rst


def _row_block(axes: list[Any], k: int) -> int | None:
    """The register block over the spatial axis outside the vector axis ``k``: its largest
    divisor in 2.._ROW_BLOCK_MAX (no tail), or None."""
    if k < 1:
        return None
    n = _extent(axes[k - 1])
    return next((f for f in range(min(n, _ROW_BLOCK_MAX), 1, -1) if n % f == 0), None)


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
    for stage in list(s.stages):
        if not isinstance(stage.op, ComputeOp) or stage.attach_type == "inline":
            continue
        if stage.op.name.endswith(".rf"):
            continue
        _schedule_stage(s, stage, caps, threshold)
    return s


# NOTE: imported for its registration (key "gpu"); it needs the registry above.
from . import default_schedules_gpu  # noqa: E402,F401
